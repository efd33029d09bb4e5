"""Flask CLI commands: ``flask --app app seed-demo``, ``flask --app app seed-bench --records N``,
``flask --app app rotate-secrets``, ``flask --app app search reindex``."""

from __future__ import annotations

import random
import time
from datetime import date, timedelta

import click
from flask import Flask, current_app
from flask.cli import AppGroup
from sqlalchemy import func, select

from monark.automations import services as automations
from monark.automations.models import Automation
from monark.core.auth import hash_password
from monark.core.crypto import rotate
from monark.core.models import Membership, Org, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services
from monark.records.bench_data import seed_bench
from monark.records.models import Record, RecordModel
from monark.search.index import reindex_all
from monark.settings.models import OrgAiSettings
from monark.wiki import services as wiki
from monark.wiki.models import WikiPage

DEMO_PASSWORD = "monark-demo"

ACME_USERS = [
    ("ada@acme.test", "Ada Lovelace", "owner"),
    ("ben@acme.test", "Ben Okafor", "member"),
    ("cy@acme.test", "Cy Tanaka", "viewer"),
]
# Ada is in both orgs, so the demo shows the org switcher.
GLOBEX_USERS = [
    ("gil@globex.test", "Gil Moreau", "owner"),
    ("ada@acme.test", "Ada Lovelace", "member"),
]

TASK_TITLES = [
    "Renew the office lease",
    "Draft the Q3 budget",
    "Call the printer supplier",
    "Review the onboarding guide",
    "Fix the invoice template",
    "Plan the team offsite",
    "Update the pricing page",
    "Audit vendor contracts",
    "Prepare the board deck",
    "Migrate the mailing list",
    "Order new laptops",
    "Write the release notes",
    "Clean up the CRM",
    "Book the conference booth",
    "Interview support candidates",
]
COMPANIES = ["Initech", "Umbrella", "Hooli", "Vandelay", "Stark", "Wayne", "Tyrell", "Soylent"]
FIRST = ["Maya", "Leo", "Iris", "Omar", "Zoe", "Hugo", "Nina", "Raj", "Elsa", "Tom", "Lin", "Ana"]
LAST = ["Kim", "Patel", "Novak", "Silva", "Berg", "Costa", "Ito", "Walsh", "Diaz", "Moss"]


def _user(email: str, name: str) -> User:
    user = db.session.scalar(select(User).where(User.email == email))
    if user is None:
        method = current_app.config["PASSWORD_HASH_METHOD"]
        user = User(email=email, name=name, password_hash=hash_password(DEMO_PASSWORD, method))
        db.session.add(user)
        db.session.flush()
    return user


def _org(name: str, slug: str, people: list[tuple[str, str, str]]) -> tuple[Org, list[User]]:
    org = db.session.scalar(select(Org).where(Org.slug == slug))
    if org is None:
        org = Org(name=name, slug=slug)
        db.session.add(org)
        db.session.flush()
    users = []
    for email, person, role in people:
        user = _user(email, person)
        exists = db.session.scalar(
            select(Membership).where(Membership.user_id == user.id, Membership.org_id == org.id)
        )
        if exists is None:
            db.session.add(Membership(user_id=user.id, org_id=org.id, role=role))
        users.append(user)
    db.session.commit()
    return org, users


def _model(principal: Principal, key: str, name: str, description: str, fields: list[dict]):
    model = db.session.scalar(
        select(RecordModel).where(RecordModel.org_id == principal.org_id, RecordModel.key == key)
    )
    if model is None:
        model = services.create_model(principal, key, name, description)
        for spec in fields:
            services.add_field(principal, model, **spec)
    return model


def _count(model: RecordModel) -> int:
    return db.session.scalar(select(func.count()).where(Record.model_id == model.id)) or 0


TASK_FIELDS = [
    {"key": "title", "label": "Title", "type": "text", "required": True},
    {
        "key": "status",
        "label": "Status",
        "type": "select",
        "required": True,
        "options": ["todo", "doing", "done"],
    },
    {"key": "due", "label": "Due date", "type": "date"},
    {"key": "assignee", "label": "Assignee", "type": "user"},
]
CONTACT_FIELDS = [
    {"key": "name", "label": "Name", "type": "text", "required": True},
    {"key": "email", "label": "Email", "type": "text"},
    {"key": "company", "label": "Company", "type": "text"},
]


def seed_org(org: Org, users: list[User], n_tasks: int, n_contacts: int, rng: random.Random):
    """Give an org its tasks and contacts models and records (only if it has none yet)."""
    owner = Principal.for_user(users[0].id, org.id, "owner")
    tasks = _model(owner, "tasks", "Tasks", "Work to do, with status and owner.", TASK_FIELDS)
    contacts = _model(owner, "contacts", "Contacts", "People we work with.", CONTACT_FIELDS)
    today = date.today()
    if _count(tasks) == 0:
        for i in range(n_tasks):
            creator = users[i % len(users)] if len(users) < 3 else users[i % 2]
            principal = Principal.for_user(creator.id, org.id, "owner")
            values = {
                "title": f"{TASK_TITLES[i % len(TASK_TITLES)]}"
                + (f" ({i // len(TASK_TITLES) + 1})" if i >= len(TASK_TITLES) else ""),
                "status": rng.choice(["todo", "doing", "done"]),
                "due": (today + timedelta(days=rng.randint(-10, 40))).isoformat(),
                "assignee": rng.choice(users).id,
            }
            private = i % 9 == 4
            services.create_record(principal, tasks, values, "private" if private else "org")
    if _count(contacts) == 0:
        for i in range(n_contacts):
            first, last = FIRST[i % len(FIRST)], LAST[(i * 7) % len(LAST)]
            values = {
                "name": f"{first} {last}",
                "email": f"{first.lower()}.{last.lower()}@example.test",
                "company": COMPANIES[i % len(COMPANIES)],
            }
            services.create_record(owner, contacts, values, "private" if i == 3 else "org")


WIKI_PAGES = [
    # (key, parent key, title, icon, body)
    ("handbook", None, "Handbook", "📘", "How we work at Acme. Start with **Onboarding**."),
    (
        "onboarding",
        "handbook",
        "Onboarding",
        "👋",
        "# Your first week\n\n1. Meet your buddy\n2. Set up your laptop\n3. Read the "
        "[Runbooks](/wiki)\n\n| Day | What |\n|---|---|\n| Mon | Accounts |\n| Tue | Shadowing |",
    ),
    ("holidays", "handbook", "Holidays", "🏖️", "Book time off two weeks ahead; tell your team."),
    ("runbooks", None, "Runbooks", "🛠️", "Step-by-step guides for things that break."),
    (
        "incidents",
        "runbooks",
        "Incident response",
        "🚨",
        "1. Say so in #ops\n2. Name an incident lead\n3. Write it up within a day",
    ),
]

REVIEW_AUTOMATION = "Review finished tasks"
REVIEW_GRAPH = {
    "nodes": [
        {"id": "status_changed", "type": "record.updated",
         "config": {"model": "tasks", "fields": ["status"]}},
        {"id": "is_done", "type": "field_matches",
         "config": {"field": "status", "operator": "equals", "value": "done"}},
        {"id": "review", "type": "create_record",
         "config": {"model": "tasks", "values": {"title": "Review: {{record.title}}",
                                                 "status": "todo"}}},
        {"id": "note", "type": "add_audit_note",
         "config": {"note": "Task {{record.id}} is done; review task {{nodes.review.record_id}}."}},
    ],
    "edges": [
        {"from": "status_changed", "to": "is_done"},
        {"from": "is_done", "to": "review", "when": True},
        {"from": "review", "to": "note"},
    ],
}  # fmt: skip


def seed_wiki(owner: Principal) -> None:
    """A small page tree (only if the org's wiki is empty)."""
    if db.session.scalar(select(func.count()).where(WikiPage.org_id == owner.org_id)):
        return
    ids: dict[str, int] = {}
    for key, parent, title, icon, body in WIKI_PAGES:
        ids[key] = wiki.create_page(owner, title, icon, ids.get(parent or ""), body).id


def seed_automation(owner: Principal) -> None:
    """One enabled example automation (only if it is missing)."""
    exists = db.session.scalar(
        select(Automation.id).where(
            Automation.org_id == owner.org_id, Automation.name == REVIEW_AUTOMATION
        )
    )
    if not exists:
        automations.create_automation(owner, REVIEW_AUTOMATION, REVIEW_GRAPH, enabled=True)


def seed_demo() -> None:
    """Create (or complete) the demo orgs, users, models and records; safe to rerun."""
    rng = random.Random(42)
    acme, acme_users = _org("Acme", "acme", ACME_USERS)
    seed_org(acme, acme_users, n_tasks=40, n_contacts=20, rng=rng)
    acme_owner = Principal.for_user(acme_users[0].id, acme.id, "owner")
    seed_wiki(acme_owner)
    seed_automation(acme_owner)  # after the records: seeding them triggers nothing
    globex, globex_users = _org("Globex", "globex", GLOBEX_USERS)
    seed_org(globex, globex_users, n_tasks=8, n_contacts=4, rng=rng)


def register_cli(app: Flask) -> None:
    """Add Monark's commands to ``flask``."""

    @app.cli.command("seed-demo")
    def seed_demo_command() -> None:
        """Create the demo orgs (Acme, Globex), users and records. Idempotent."""
        seed_demo()
        click.echo(
            "Demo data ready. Sign in as ada@acme.test (owner), ben@acme.test (member), "
            f"cy@acme.test (viewer) or gil@globex.test; password: {DEMO_PASSWORD}"
        )

    @app.cli.command("seed-bench")
    @click.option("--records", "records", type=click.IntRange(1, 10_000_000), default=100_000)
    def seed_bench_command(records: int) -> None:
        """Load N records a member sees (and more they do not), fast, for benchmarks."""
        started = time.perf_counter()
        made = seed_bench(records)
        click.echo(
            f"Loaded {records:,} records visible to user {made.member.user_id} of org "
            f"{made.member.org_id} (model tasks, id {made.model_id}) in "
            f"{time.perf_counter() - started:.1f} s."
        )

    @app.cli.command("rotate-secrets")
    def rotate_secrets_command() -> None:
        """Encrypt every stored secret anew with the first of ENCRYPTION_KEYS."""
        count = rotate_secrets()
        click.echo(f"{count} stored key(s) encrypted with the first of ENCRYPTION_KEYS.")

    search = AppGroup("search", help="The search index.")

    @search.command("reindex")
    def search_reindex_command() -> None:
        """Rebuild the search index from the tables (after a restore, or bulk writes)."""
        count = reindex_all(db.session)
        db.session.commit()
        click.echo(f"Search index rebuilt: {count} document(s).")

    app.cli.add_command(search)


def rotate_secrets() -> int:
    """Re-encrypt the orgs' provider keys with the deployment's first key; how many."""
    rows = db.session.scalars(
        select(OrgAiSettings).where(OrgAiSettings.api_key_encrypted.is_not(None))
    ).all()
    for row in rows:
        row.api_key_encrypted = rotate(row.api_key_encrypted)
    db.session.commit()
    return len(rows)
