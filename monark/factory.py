"""``create_app``: config, extensions, blueprints, error handlers, the assistant's tools.

It does nothing else: no data loading, no migrations (``flask db upgrade``, ``seed-demo``).
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from monark import models  # noqa: F401  (every table, for Alembic and create_all)
from monark.api import upkeep as api_upkeep  # noqa: F401  (declares periodic jobs)
from monark.api.routes import V1_ROUTES
from monark.api.views import bp as api_bp
from monark.approvals import upkeep as approvals_upkeep  # noqa: F401  (periodic jobs)
from monark.approvals.allowances import AllowanceGate
from monark.assistant import gauges
from monark.assistant.ask_user import AskUserTool
from monark.assistant.blueprint import bp as assistant_bp
from monark.assistant.feedback_views import moderation_bp
from monark.assistant.gates import AssistantGates
from monark.assistant.inbox import bp as approvals_bp
from monark.assistant.navigate import NavigateTool
from monark.assistant.panel import register_panel
from monark.assistant.prompt import AssistantPrompt
from monark.assistant.tools import build_chat_toolset
from monark.audit.views import bp as audit_bp
from monark.automations import leases, retention, schedules  # noqa: F401  (periodic jobs)
from monark.automations.engine import install_engine
from monark.automations.routes import AUTOMATION_ROUTES
from monark.automations.routes import bp as automations_internal_bp
from monark.automations.views import bp as automations_bp
from monark.chat import runtime
from monark.cli import register_cli
from monark.config import engine_options, instance_secret_key, load_config
from monark.core import jobs, mail, metrics, ratelimit, sessions, settings, two_factor
from monark.core import upkeep as core_upkeep  # noqa: F401  (periodic jobs)
from monark.core.accesslog import install_request_log_filter
from monark.core.auth import CookieSessions
from monark.core.errors import register_error_handlers
from monark.core.jsonbody import JSONProvider
from monark.core.outbox import bp as outbox_bp
from monark.core.recovery import bp as account_bp
from monark.core.signin import bp as signin_bp
from monark.core.web import register_web
from monark.extensions import csrf, db, login_manager, migrate
from monark.notifications import delivery as notification_delivery
from monark.notifications.views import bp as notifications_bp
from monark.records.views import bp as records_bp
from monark.search.routes import SEARCH_ROUTES
from monark.search.routes import bp as search_internal_bp
from monark.search.views import bp as search_bp
from monark.settings import ai_provider, budgets
from monark.settings.ai import bp as settings_ai_bp
from monark.settings.metering import Metering
from monark.settings.prices import PriceError, price_table
from monark.settings.time_zone_views import bp as settings_zones_bp
from monark.settings.usage_views import bp as settings_usage_bp
from monark.settings.views import bp as settings_bp
from monark.wiki.routes import WIKI_ROUTES
from monark.wiki.routes import bp as wiki_internal_bp
from monark.wiki.views import bp as wiki_bp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BLUEPRINTS = (
    signin_bp,
    account_bp,
    records_bp,
    settings_bp,
    settings_ai_bp,
    settings_usage_bp,
    settings_zones_bp,
    audit_bp,
    assistant_bp,
    moderation_bp,
    approvals_bp,
    automations_bp,
    automations_internal_bp,
    wiki_bp,
    wiki_internal_bp,
    search_bp,
    search_internal_bp,
    api_bp,
    outbox_bp,
    notifications_bp,
)
# Every route an agent may call, declared beside its feature's services.
ROUTES = (*V1_ROUTES, *AUTOMATION_ROUTES, *WIKI_ROUTES, *SEARCH_ROUTES)


def create_app(overrides: dict[str, Any] | None = None) -> Flask:
    """Build the app: config, extensions, blueprints, error handlers. Nothing else."""
    app = Flask(
        __name__,
        template_folder=os.path.join(ROOT, "templates"),
        static_folder=os.path.join(ROOT, "static"),
        instance_path=os.path.join(ROOT, "instance"),
    )
    app.json = JSONProvider(app)  # request bodies parse with a nesting limit
    app.config.from_mapping(load_config(app.instance_path))
    app.config.update(overrides or {})
    # After the overrides: the options must fit the database actually used.
    app.config.setdefault(
        "SQLALCHEMY_ENGINE_OPTIONS", engine_options(app.config["SQLALCHEMY_DATABASE_URI"])
    )
    if proxies := app.config["TRUSTED_PROXIES"]:
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=proxies, x_proto=proxies, x_host=proxies, x_prefix=proxies
        )
    os.makedirs(app.instance_path, exist_ok=True)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = instance_secret_key(app.instance_path)
    settings.install(app)  # read once, after every override
    try:  # a deployment's price file is checked at start, not at its first reply
        prices = price_table(settings.spend_settings(app).prices_file)
    except PriceError as err:
        raise RuntimeError(f"PRICES_FILE: {err}") from None
    metrics.name_values("model", [m for _provider, m in prices.prices])

    db.init_app(app)
    migrate.init_app(
        app, db, directory=os.path.join(ROOT, "migrations"), render_as_batch=True, compare_type=True
    )
    login_manager.init_app(app)
    app.session_interface = CookieSessions()
    login_manager.login_view = "auth.login"
    login_manager.login_message = "Sign in to continue."
    csrf.init_app(app)
    mail.init_app(app)

    metrics.init_app(app)  # first: its clock starts before every other hook
    register_web(app)
    sessions.init_app(app)  # each session's last-seen time, after the request
    # An owner or admin of an org that requires two-factor, without it, enrols first.
    app.before_request(two_factor.enforce)
    install_request_log_filter()  # ``flask run``'s access log: gunicorn's rule
    register_panel(app)
    for blueprint in BLUEPRINTS:
        app.register_blueprint(blueprint)
    ratelimit.init_app(app, api_bp)
    register_error_handlers(app)
    register_cli(app)
    install_engine()
    notification_delivery.install()  # mail after commit
    jobs.init_app(app)  # after every feature declared its jobs (at import)
    gauges.install(app)
    toolset = build_chat_toolset(ROUTES, [NavigateTool(), AskUserTool()])
    metrics.name_values("tool", [spec.name for spec in toolset.specs()])
    runtime.install(
        app,
        runtime.ChatRuntime(
            toolset,
            AllowanceGate(),
            ai_provider.resolve,
            AssistantGates(),
            AssistantPrompt(),
            budgets.spend_check,
            Metering(),
        ),
    )
    return app
