"""Flask CLI commands: ``flask --app app seed-demo``."""

from __future__ import annotations

import random
from datetime import date, timedelta

import click
from flask import Flask, current_app
from sqlalchemy import func, select

from monark.core.auth import hash_password
from monark.core.models import Membership, Org, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.records import services
from monark.records.models import Record, RecordModel

DEMO_PASSWORD = "monark-demo"

ACME_USERS = [
    ("ada@acme.test", "Ada Lovelace", "owner"),
    ("ben@acme.test", "Ben Okafor", "member"),
    ("cy@acme.test", "Cy Tanaka", "viewer"),
]
GLOBEX_USERS = [("gil@globex.test", "Gil Moreau", "owner")]

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


def seed_demo() -> None:
    """Create (or complete) the demo orgs, users, models and records; safe to rerun."""
    rng = random.Random(42)
    acme, acme_users = _org("Acme", "acme", ACME_USERS)
    seed_org(acme, acme_users, n_tasks=40, n_contacts=20, rng=rng)
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
