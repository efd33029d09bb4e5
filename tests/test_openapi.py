"""The OpenAPI document of /api/v1 is generated from the route registry and complete."""

from __future__ import annotations

from typing import Any

import pytest

from monark.api.routes import V1_ROUTES

TOOL_NAMES = {
    "me_get",
    "models_list",
    "models_get",
    "records_list",
    "records_get",
    "records_create",
    "records_update",
    "records_delete",
    "records_query",
    "records_query_tables",
    "approvals_get",
}


@pytest.fixture
def spec(app) -> dict[str, Any]:
    response = app.test_client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    return response.get_json()


def resolve(spec: dict[str, Any], ref: str) -> dict[str, Any]:
    assert ref.startswith("#/"), ref
    node: Any = spec
    for part in ref[2:].split("/"):
        assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
        node = node[part]
    return node


def all_refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        refs = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return refs + [r for value in node.values() for r in all_refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in all_refs(value)]
    return []


def operation(spec: dict[str, Any], route) -> dict[str, Any]:
    return spec["paths"][route.path][route.method.lower()]


def test_it_is_openapi_3_1_with_servers_and_security(spec):
    assert spec["openapi"].startswith("3.1")
    assert spec["info"]["title"] and spec["info"]["version"]
    assert spec["servers"] == [{"url": "/api/v1"}]
    schemes = spec["components"]["securitySchemes"]
    assert schemes["apiKey"] == {**schemes["apiKey"], "type": "http", "scheme": "bearer"}
    assert {name for item in spec["security"] for name in item} <= set(schemes)


def test_it_needs_no_credentials(app, world):
    response = app.test_client().get("/api/v1/openapi.json")
    assert response.status_code == 200


def test_every_registered_route_is_documented_and_nothing_else(spec):
    documented = {
        (path, method.upper())
        for path, item in spec["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert documented == {(r.path, r.method) for r in V1_ROUTES}


def test_every_documented_route_is_served(app):
    rules = {
        (rule.rule, method)
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if rule.rule.startswith("/api/v1/")
    }
    for route in V1_ROUTES:
        assert ("/api/v1" + route.flask_rule, route.method) in rules, route.name


def test_operation_ids_are_the_route_names_and_unique(spec):
    ids = [operation(spec, r)["operationId"] for r in V1_ROUTES]
    assert ids == [r.name for r in V1_ROUTES]
    assert len(set(ids)) == len(ids)
    for route in V1_ROUTES:
        op = operation(spec, route)
        assert op["summary"] == route.summary
        assert op["x-permission"] == route.permission


def test_path_parameters_match_the_path_template(spec):
    for route in V1_ROUTES:
        params = operation(spec, route)["parameters"]
        in_path = [p for p in params if p["in"] == "path"]
        assert [p["name"] for p in in_path] == route.path_params(), route.name
        for param in in_path:
            assert param["required"] is True
            assert param["schema"].get("type") in ("string", "integer"), param
        if route.path_model is None:
            assert not in_path


def test_query_parameters_come_from_the_query_model(spec):
    for route in V1_ROUTES:
        in_query = {
            p["name"]: p for p in operation(spec, route)["parameters"] if p["in"] == "query"
        }
        expected = set(route.query_model.model_fields) if route.query_model else set()
        assert set(in_query) == expected, route.name
        for name, param in in_query.items():
            assert param["description"], param
            assert param["required"] is route.query_model.model_fields[name].is_required()
    records_list = next(r for r in V1_ROUTES if r.name == "records_list")
    limit = next(p for p in operation(spec, records_list)["parameters"] if p["name"] == "limit")
    assert limit["schema"]["minimum"] == 1
    assert limit["schema"]["maximum"] == 100
    assert limit["schema"]["default"] == 25


def test_request_bodies_for_body_models_only(spec):
    for route in V1_ROUTES:
        op = operation(spec, route)
        if route.body_model is None:
            assert "requestBody" not in op, route.name
            continue
        body = op["requestBody"]
        assert body["required"] is True
        schema = body["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{route.body_model.__name__}"}
        target = resolve(spec, schema["$ref"])
        assert set(target["properties"]) == set(route.body_model.model_fields)
        assert "values" in target["required"]
        assert target.get("additionalProperties") is False


def test_success_responses_reference_resolvable_schemas(spec):
    for route in V1_ROUTES:
        responses = operation(spec, route)["responses"]
        success = responses[str(route.status)]
        schema = success["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{route.response_model.__name__}"}
        target = resolve(spec, schema["$ref"])
        assert set(target["properties"]) == set(route.response_model.model_fields)
        for code in ("400", "401", "403", "404"):
            error = responses[code]["content"]["application/json"]["schema"]
            assert resolve(spec, error["$ref"]) is spec["components"]["schemas"]["Error"]


def test_every_ref_in_the_document_resolves(spec):
    refs = all_refs(spec)
    assert refs
    for ref in refs:
        resolve(spec, ref)
    assert "$defs" not in str(refs)


def test_error_schema_matches_the_error_bodies(spec, app, world):
    error = spec["components"]["schemas"]["Error"]
    inner = error["properties"]["error"]
    assert set(inner["required"]) == {"code", "message", "details"}
    assert set(inner["properties"]["details"]["items"]["properties"]) == {"field", "in", "message"}
    response = app.test_client().get(
        "/api/v1/models/tasks/records?limit=0",
        headers={"Authorization": f"Bearer {world.a.keys['viewer']}"},
    )
    body = response.get_json()
    assert set(body) == set(error["required"])
    assert set(body["error"]) == set(inner["required"])
    for detail in body["error"]["details"]:
        assert set(detail) == set(inner["properties"]["details"]["items"]["properties"])


def test_mcp_tool_extension_matches_the_registry(spec):
    for route in V1_ROUTES:
        op = operation(spec, route)
        if route.audience != "public":
            assert "x-mcp-tool" not in op
            continue
        assert op["x-mcp-tool"] == {
            "name": route.name,
            "mutates": route.method != "GET",
        }


def test_the_tool_set_is_exactly_the_expected_one(spec):
    documented = {
        op["x-mcp-tool"]["name"]
        for item in spec["paths"].values()
        for op in item.values()
        if "x-mcp-tool" in op
    }
    assert documented == TOOL_NAMES
    assert {r.name for r in V1_ROUTES if r.audience == "public"} == TOOL_NAMES
    mutating = {
        op["x-mcp-tool"]["name"]
        for item in spec["paths"].values()
        for op in item.values()
        if op.get("x-mcp-tool", {}).get("mutates")
    }
    assert mutating == {"records_create", "records_update", "records_delete"}
