"""The wiki: the page tree, pages and their editor, moves and archives, via web and JSON."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from monark.api.dispatch import dispatch
from monark.core.models import Event
from monark.extensions import db
from monark.wiki import services
from monark.wiki.models import WikiPage
from tests import factories

PAGES = "/internal/wiki/pages"


@pytest.fixture
def pages(world: factories.World) -> dict[str, int]:
    """Acme's wiki: Handbook (Onboarding (Laptops), Holidays) and Runbooks."""
    editor = world.a.principal("member")
    handbook = services.create_page(editor, "Handbook", "📘")
    onboarding = services.create_page(editor, "Onboarding", "👋", handbook.id, "# Welcome")
    laptops = services.create_page(editor, "Laptops", "", onboarding.id)
    holidays = services.create_page(editor, "Holidays", "🏖️", handbook.id)
    runbooks = services.create_page(editor, "Runbooks", "🛠️")
    return {
        "handbook": handbook.id,
        "onboarding": onboarding.id,
        "laptops": laptops.id,
        "holidays": holidays.id,
        "runbooks": runbooks.id,
    }


def outline(nodes: list[dict]) -> list:
    """The JSON tree as nested (title, [children]) pairs."""
    return [(n["title"], outline(n["children"])) for n in nodes]


def tree_of(browser) -> list:
    return outline(browser.api("GET", PAGES).get_json()["pages"])


def soup(response) -> BeautifulSoup:
    return BeautifulSoup(response.get_data(as_text=True), "html.parser")


def sidebar(response) -> list[str]:
    return [a.get_text(" ", strip=True) for a in soup(response).select("nav.wiki-tree li > a")]


def events(kind: str) -> int:
    return db.session.scalar(select(func.count()).where(Event.type == kind)) or 0


HANDBOOK_TREE = [
    ("Handbook", [("Onboarding", [("Laptops", [])]), ("Holidays", [])]),
    ("Runbooks", []),
]


# ---- reading --------------------------------------------------------------------------


def test_the_tree_comes_in_order_as_json_and_in_the_sidebar(pages, login):
    viewer = login("viewer@acme.test")
    assert tree_of(viewer) == HANDBOOK_TREE
    first = viewer.api("GET", PAGES).get_json()["pages"][0]
    assert first["icon"] == "📘" and first["url"] == f"/wiki/{pages['handbook']}"
    page = viewer.get(f"/wiki/{pages['laptops']}")
    assert page.status_code == 200
    assert sidebar(page) == ["📘 Handbook", "👋 Onboarding", "Laptops", "🏖️ Holidays", "🛠️ Runbooks"]
    current = soup(page).select_one('nav.wiki-tree a[aria-current="page"]')
    assert current.get_text(strip=True) == "Laptops"
    crumbs = [a.get_text() for a in soup(page).select(".crumbs a")]
    assert crumbs == ["Wiki", "Handbook", "Onboarding"]
    assert sidebar(viewer.get("/wiki")) == sidebar(page)


def test_get_page_returns_the_body_and_path(pages, login):
    body = login("viewer@acme.test").api("GET", f"{PAGES}/{pages['onboarding']}").get_json()
    assert body["body"] == "# Welcome"
    assert body["path"] == [{"id": pages["handbook"], "title": "Handbook"}]
    assert body["parent_id"] == pages["handbook"] and body["position"] == 0


def test_the_rendered_body_is_sanitized(world, login):
    hostile = (
        "# Hi\n\n<script>alert(1)</script>\n\n"
        "[click](javascript:alert(2)) [ok](https://example.com)\n\n"
        '<img src=x onerror="alert(3)">\n\n![remote](https://evil.example/t.png)\n\n'
        "**bold**"
    )
    page = services.create_page(world.a.principal("member"), "Hostile", body=hostile)
    response = login("viewer@acme.test").get(f"/wiki/{page.id}")
    body = soup(response).select_one(".wiki-body")
    assert body.select_one("h1").get_text() == "Hi"
    assert body.select_one("strong").get_text() == "bold"
    assert body.select("script") == []
    # A remote image is never fetched: it becomes a link the reader may follow.
    assert body.select("img") == []
    links = [(a.get("href"), a.get_text()) for a in body.select("a")]
    assert links == [
        ("https://example.com", "ok"),
        ("https://evil.example/t.png", "Image: remote"),
    ]
    assert not [attr for tag in body.find_all(True) for attr in tag.attrs if attr.startswith("on")]
    assert "<script>alert(1)</script>" in body.get_text()  # shown as text, never run


def test_the_nav_links_the_wiki(world, login):
    nav = soup(login("viewer@acme.test").get("/wiki")).select_one("nav.nav")
    assert "Wiki" in [a.get_text() for a in nav.select("a")]


# ---- writing through the web ----------------------------------------------------------


def test_web_create_edit_move_and_archive(pages, login):
    member = login("member@acme.test")
    form = member.get(f"/wiki/new?parent_id={pages['handbook']}")
    selected = soup(form).select_one("#parent_id option[selected]")
    assert selected.get_text(strip=True) == "Handbook"
    created = member.post(
        "/wiki/new",
        {"title": "Expenses", "icon": "💶", "parent_id": str(pages["handbook"]), "body": "Hi"},
    )
    assert created.status_code == 303
    new_id = int(created.headers["Location"].rsplit("/", 1)[1])
    bad = member.post(f"/wiki/{new_id}/edit", {"title": " ", "icon": "money", "body": "x"})
    assert bad.status_code == 422
    errors = {p.get("id"): p.get_text() for p in soup(bad).select("p.error[id]")}
    assert set(errors) == {"title-error", "icon-error"}
    edited = member.post(
        f"/wiki/{new_id}/edit", {"title": "Expense policy", "icon": "", "body": "*Receipts*"}
    )
    assert edited.status_code == 303
    page = member.get(f"/wiki/{new_id}")
    assert soup(page).select_one("h1").get_text(strip=True) == "Expense policy"
    assert soup(page).select_one(".wiki-body em").get_text() == "Receipts"
    # Move to the top of Handbook's children, then under Runbooks.
    assert (
        member.post(
            f"/wiki/{new_id}/move", {"parent_id": str(pages["handbook"]), "position": "1"}
        ).status_code
        == 303
    )
    assert [t for t, _ in tree_of(member)[0][1]] == ["Expense policy", "Onboarding", "Holidays"]
    member.post(f"/wiki/{new_id}/move", {"parent_id": str(pages["runbooks"]), "position": ""})
    assert tree_of(member)[1] == ("Runbooks", [("Expense policy", [])])
    # Archive Handbook: its subpages go with it.
    archived = member.post(f"/wiki/{pages['handbook']}/archive")
    assert archived.status_code == 303 and archived.headers["Location"] == "/wiki"
    assert tree_of(member) == [("Runbooks", [("Expense policy", [])])]
    assert member.get(f"/wiki/{pages['laptops']}").status_code == 404


def test_web_move_into_a_subpage_is_refused(pages, login):
    member = login("member@acme.test")
    response = member.post(f"/wiki/{pages['handbook']}/move", {"parent_id": str(pages["laptops"])})
    assert response.status_code == 303
    page = member.get(response.headers["Location"])
    assert "cannot go under itself" in page.get_data(as_text=True)
    assert tree_of(member) == HANDBOOK_TREE
    move_options = [o.get_text(strip=True) for o in soup(page).select("#move-parent option")]
    assert move_options == ["(top level)", "Runbooks"]  # never itself or its subpages


@pytest.mark.parametrize("position", ["0", "-5", "two"])
def test_web_move_names_a_bad_position_in_the_forms_own_terms(pages, login, position):
    member = login("member@acme.test")
    response = member.post(f"/wiki/{pages['laptops']}/move", {"position": position})
    page = member.get(response.headers["Location"]).get_data(as_text=True)
    assert "Give a position of 1 (first) or more." in page
    assert tree_of(member) == HANDBOOK_TREE


def test_each_archive_is_listed_and_undone_on_its_own(pages, login):
    member = login("member@acme.test")
    member.post(f"/wiki/{pages['onboarding']}/archive")  # Laptops goes with it
    member.post(f"/wiki/{pages['handbook']}/archive")  # Holidays goes with it

    def listing() -> list[list[str]]:
        rows = soup(member.get("/wiki/archived")).select("tbody tr")
        return [[td.get_text(" ", strip=True) for td in tr.select("td")[:2]] for tr in rows]

    assert listing() == [["📘 Handbook", "1"], ["👋 Onboarding", "1"]]  # newest first
    assert member.post(f"/wiki/{pages['handbook']}/restore").status_code == 303
    # Onboarding was archived on its own before: it stays archived.
    assert tree_of(member) == [("Handbook", [("Holidays", [])]), ("Runbooks", [])]
    assert listing() == [["👋 Onboarding", "1"]]
    # Opening an archived page says so, and where to find it.
    gone = member.get(f"/wiki/{pages['laptops']}")
    assert gone.status_code == 404
    assert "This page is archived" in gone.get_data(as_text=True)
    assert soup(gone).select_one('main a[href="/wiki/archived"]') is not None
    member.post(f"/wiki/{pages['onboarding']}/restore")
    assert tree_of(member) == HANDBOOK_TREE  # back where it was, with Laptops
    assert events("wiki_page.restored") == 2
    assert listing() == []


def test_a_page_whose_parent_stays_archived_comes_back_at_the_top(pages, login):
    member = login("member@acme.test")
    member.post(f"/wiki/{pages['handbook']}/archive")
    member.post(f"/wiki/{pages['laptops']}/restore")
    assert tree_of(member) == [("Runbooks", []), ("Laptops", [])]
    # Viewers see what is archived, without a Restore button; restoring is refused.
    viewer = login("viewer@acme.test")
    listing = soup(viewer.get("/wiki/archived"))
    assert [td.get_text(" ", strip=True) for td in listing.select("tbody tr td:first-child")] == [
        "📘 Handbook"
    ]
    assert listing.select("main table button") == []
    assert viewer.post(f"/wiki/{pages['handbook']}/restore").status_code == 403
    # A live page cannot be "restored".
    assert member.post(f"/wiki/{pages['runbooks']}/restore").status_code == 404


# ---- writing through JSON ---------------------------------------------------------------


def test_json_create_rename_icon_move_archive(pages, login):
    member = login("member@acme.test")
    created = member.api(
        "POST", PAGES, json={"title": "FAQ", "icon": "❓", "parent_id": pages["handbook"]}
    )
    assert created.status_code == 201
    faq = created.get_json()
    assert (faq["title"], faq["icon"], faq["position"]) == ("FAQ", "❓", 2)
    one = f"{PAGES}/{faq['id']}"
    renamed = member.api("POST", f"{one}/rename", json={"title": "Questions"})
    assert renamed.get_json()["title"] == "Questions"
    assert member.api("POST", f"{one}/icon", json={"icon": "🙋🏽‍♀️"}).get_json()["icon"] == "🙋🏽‍♀️"
    assert member.api("POST", f"{one}/icon", json={"icon": ""}).get_json()["icon"] == ""
    first = member.api("POST", f"{one}/move", json={"position": 0}).get_json()
    assert (first["parent_id"], first["position"]) == (pages["handbook"], 0)
    top = member.api("POST", f"{one}/move", json={"parent_id": None}).get_json()
    assert (top["parent_id"], top["position"]) == (None, 2)
    assert [t for t, _ in tree_of(member)] == ["Handbook", "Runbooks", "Questions"]
    archived = member.api("POST", f"{PAGES}/{pages['onboarding']}/archive").get_json()
    assert archived == {"archived_ids": [pages["onboarding"], pages["laptops"]]}
    assert tree_of(member)[0] == ("Handbook", [("Holidays", [])])
    assert member.api("GET", f"{PAGES}/{pages['laptops']}").status_code == 404
    assert events("wiki_page.created") == 6 and events("wiki_page.archived") == 1
    assert events("wiki_page.moved") == 2 and events("wiki_page.updated") == 3


def test_json_move_into_own_descendant_is_rejected(pages, login):
    member = login("member@acme.test")
    for target in ("handbook", "onboarding", "laptops"):
        response = member.api(
            "POST", f"{PAGES}/{pages['handbook']}/move", json={"parent_id": pages[target]}
        )
        assert response.status_code == 400, target
        [detail] = response.get_json()["error"]["details"]
        assert detail["field"] == "parent_id"
    assert tree_of(member) == HANDBOOK_TREE
    assert events("wiki_page.moved") == 0


def test_json_rejects_bad_input_naming_the_field(pages, login):
    member = login("member@acme.test")
    cases = [
        ({"title": ""}, "title"),
        ({"title": "A\nB"}, "title"),
        ({"title": "x", "icon": "abc"}, "icon"),
        ({"title": "x", "parent_id": 999999}, "parent_id"),
        ({"title": "x", "colour": "red"}, "colour"),
        ({}, "title"),
    ]
    for body, field in cases:
        response = member.api("POST", PAGES, json=body)
        assert response.status_code == 400, body
        assert field in [d["field"] for d in response.get_json()["error"]["details"]], body
    assert (
        member.api("POST", f"{PAGES}/{pages['runbooks']}/move", json={"position": -1}).status_code
        == 400
    )
    assert db.session.scalar(select(func.count()).select_from(WikiPage)) == 5


# ---- who may ---------------------------------------------------------------------------


def test_a_viewer_reads_but_cannot_edit(pages, login):
    viewer = login("viewer@acme.test")
    one = pages["runbooks"]
    assert viewer.get(f"/wiki/{one}").status_code == 200
    assert "Edit" not in [a.get_text() for a in soup(viewer.get(f"/wiki/{one}")).select("a.button")]
    assert viewer.get("/wiki/new").status_code == 403
    assert viewer.get(f"/wiki/{one}/edit").status_code == 403
    assert viewer.post("/wiki/new", {"title": "Mine"}).status_code == 403
    assert viewer.post(f"/wiki/{one}/edit", {"title": "Mine"}).status_code == 403
    assert viewer.post(f"/wiki/{one}/move", {"parent_id": ""}).status_code == 403
    assert viewer.post(f"/wiki/{one}/archive").status_code == 403
    for method, path, body in (
        ("POST", PAGES, {"title": "Mine"}),
        ("POST", f"{PAGES}/{one}/rename", {"title": "Mine"}),
        ("POST", f"{PAGES}/{one}/icon", {"icon": "🙂"}),
        ("POST", f"{PAGES}/{one}/move", {"position": 0}),
        ("POST", f"{PAGES}/{one}/archive", {}),
    ):
        response = viewer.api(method, path, json=body)
        assert response.status_code == 403, path
        assert response.get_json()["error"]["code"] == "forbidden"
    assert tree_of(viewer) == HANDBOOK_TREE
    assert events("wiki_page.updated") == events("wiki_page.moved") == 0


def test_another_org_cannot_see_or_touch_the_pages(pages, world, login):
    globex = login("owner@globex.test")
    services.create_page(world.b.principal("owner"), "Globex only")
    assert tree_of(globex) == [("Globex only", [])]
    one = pages["onboarding"]
    assert globex.get(f"/wiki/{one}").status_code == 404
    assert globex.get(f"/wiki/{one}/edit").status_code == 404
    assert globex.post(f"/wiki/{one}/archive").status_code == 404
    assert globex.api("GET", f"{PAGES}/{one}").status_code == 404
    assert globex.api("POST", f"{PAGES}/{one}/rename", json={"title": "Mine"}).status_code == 404
    stolen = globex.api("POST", PAGES, json={"title": "Child", "parent_id": one})
    assert stolen.status_code == 400
    assert "Acme" not in stolen.get_data(as_text=True)
    assert "Onboarding" not in globex.get("/wiki").get_data(as_text=True)
    assert (
        login("member@acme.test").api("GET", f"{PAGES}/{one}").get_json()["title"] == "Onboarding"
    )


def test_the_dispatcher_reads_and_renames_as_the_user(pages, world):
    member, viewer = world.a.principal("member"), world.a.principal("viewer")
    tree = dispatch(viewer, "GET", PAGES)
    assert outline(tree.body["pages"]) == HANDBOOK_TREE
    renamed = dispatch(
        member, "POST", f"{PAGES}/{pages['runbooks']}/rename", json_body={"title": "Ops"}
    )
    assert renamed.status == 200 and renamed.body["title"] == "Ops"
    refused = dispatch(
        viewer, "POST", f"{PAGES}/{pages['runbooks']}/rename", json_body={"title": "X"}
    )
    assert refused.status == 403
    event = db.session.scalars(select(Event).where(Event.type == "wiki_page.updated")).one()
    assert event.payload == {"page_id": pages["runbooks"], "fields": ["title"]}
