"""The model provider layer: provider-neutral types (``types``), what a provider is
(``descriptor``: its id, descriptor and configuration, which the adapters read), the
providers Monark knows (``providers``: one descriptor each) and one adapter per SDK (``anthropic``,
``openai_chat``, ``gemini``), each the only module importing its SDK, imported when first
built. Which provider an org's turn uses is the chat runtime's business
(``monark.chat.runtime``, the host's resolver, ``monark.settings.ai_provider``)."""
