"""Cross-cutting pieces every layer above may use.

Accounts, orgs, memberships, API keys, invitations and events (``models``); who is asking
(``auth``, ``rbac``, ``keys``, ``tokens``), signing in (``signin``), rate limits
(``ratelimit``); domain events (``events``) and errors (``errors``); units of work
(``uow``); the route-descriptor kit (``routes``); what HTML pages share (``web``,
``htmx``); reading input (``ids``, ``jsonbody``, ``text``); Markdown rendering
(``markdown``); progress logs (``broker``); what an access log may say of a request
(``accesslog``); ``/metrics`` (``metrics``).
"""
