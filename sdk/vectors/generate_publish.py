#!/usr/bin/env python3
"""Writes publish.json: events as a producer describes them, each with the hub's verdict.

The Go publisher helper (sdk/go/publish) refuses every event marked invalid, naming the same
header, and builds exactly the headers given for the valid ones; the hub's own judge is checked
against the same file (hub-core `envelope::tests::publisher_vectors`). Standard library only:
`python3 sdk/vectors/generate_publish.py` rewrites the file.
"""
import base64
import json
import pathlib

ID = "01936f6e-8b7a-7cc3-9b2e-0123456789ab"
TIME = "2026-12-01T10:00:00Z"


def event(**changes):
    e = {
        "source": "lender",
        "resource_type": "loan_application",
        "event_type": "approved",
        "tenant_id": "acme",
        "schema_version": "1.0.0",
        "id": ID,
        "time": TIME,
        "data": '{"amount":100}',
    }
    e.update(changes)
    return e


def headers(e, id=ID, **extra):
    h = {
        "ce-specversion": "1.0",
        "ce-id": id,
        "ce-source": e["source"],
        "ce-type": f"studio.lerian.{e['source']}.{e['resource_type']}.{e['event_type']}",
        "ce-time": TIME,
        "ce-schemaversion": e["schema_version"],
        "ce-resourcetype": e["resource_type"],
        "ce-eventtype": e["event_type"],
        "ce-tenantid": e["tenant_id"],
    }
    h.update(extra)
    return h


def valid(name, e, **extra):
    id = extra.pop("id", ID)
    return {"name": name, "event": e, "valid": True, "topic": f"lerian.streaming.{e['source']}", "headers": headers(e, id, **extra)}


def invalid(name, header, **changes):
    return {"name": name, "event": event(**changes), "valid": False, "header": header}


def nested(depth):
    return "[" * depth + "]" * depth


cases = [
    valid("minimal", event()),
    valid(
        "every optional attribute",
        event(subject="loan-42", data_schema="https://schemas.example/loan/1.0.0.json",
              data_content_type="application/json; charset=utf-8",
              traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate="vendor=1",
              extensions={"region": "br"}),
        **{"ce-subject": "loan-42", "ce-dataschema": "https://schemas.example/loan/1.0.0.json",
           "ce-datacontenttype": "application/json; charset=utf-8",
           "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=1",
           "ce-region": "br"},
    ),
    valid("an uppercase braced id is written hyphenated in lowercase",
          event(id="{" + ID.upper() + "}"), id=ID),
    valid("a simple-form id", event(id=ID.replace("-", "")), id=ID),
    valid("a body that is not JSON under another content type",
          event(data_content_type="text/plain", data="not json"), **{"ce-datacontenttype": "text/plain"}),
    valid("a +json content type with JSON", event(data_content_type="application/vnd.lerian+json"),
          **{"ce-datacontenttype": "application/vnd.lerian+json"}),
    valid("nested exactly 64 levels", event(data=nested(64))),
    valid("a source of 223 bytes", event(source="s" * 223)),
    valid("a semantic version with pre-release and build", event(schema_version="2.1.0-rc.1+build.5")),
    valid("multi-byte text in the subject", event(subject="empréstimo"), **{"ce-subject": "empréstimo"}),
    valid("a tenant with dots, dashes and underscores", event(tenant_id="Acme-Bank_01.br"),
          **{"ce-tenantid": "Acme-Bank_01.br"}),
    invalid("an uppercase source", "ce-source", source="Lender"),
    invalid("a source with a dot", "ce-source", source="lend.er"),
    invalid("a source of 224 bytes", "ce-source", source="s" * 224),
    invalid("a resource type with a space", "ce-resourcetype", resource_type="loan application"),
    invalid("an empty resource type", "ce-resourcetype", resource_type=""),
    invalid("the hub's own resource type", "ce-resourcetype", resource_type="streaming_hub"),
    invalid("an event type starting with _", "ce-eventtype", event_type="_approved"),
    invalid("an event type of 129 bytes", "ce-eventtype", event_type="e" * 129),
    invalid("an empty tenant", "ce-tenantid", tenant_id=""),
    invalid("a tenant of 257 bytes", "ce-tenantid", tenant_id="t" * 257),
    invalid("a control character in the tenant", "ce-tenantid", tenant_id="ac\u0007me"),
    invalid("a C1 control character in the tenant", "ce-tenantid", tenant_id="ac\u0085me"),
    invalid("a tenant that climbs out of a path", "ce-tenantid", tenant_id="../victim"),
    invalid("a tenant with a slash", "ce-tenantid", tenant_id="a/b"),
    invalid("a tenant with two dots inside", "ce-tenantid", tenant_id="a..b"),
    invalid("a tenant starting with a dot", "ce-tenantid", tenant_id=".acme"),
    invalid("a multi-byte tenant", "ce-tenantid", tenant_id="açaí"),
    invalid("a two-part version", "ce-schemaversion", schema_version="1.0"),
    invalid("a leading zero in the version", "ce-schemaversion", schema_version="01.0.0"),
    invalid("a version of 65 bytes", "ce-schemaversion", schema_version="1.0.0-" + "a" * 59),
    invalid("a UUIDv4 id", "ce-id", id="9b2e0c9e-2f4b-4c1a-9d3e-0123456789ab"),
    invalid("an id that is no UUID", "ce-id", id="not-a-uuid"),
    invalid("a subject of 1025 bytes", "ce-subject", subject="s" * 1025),
    invalid("a newline in the subject", "ce-subject", subject="loan\n42"),
    invalid("a data schema that is no URI", "ce-dataschema", data_schema="not a uri"),
    invalid("a JSON body that does not parse", "body", data="{"),
    invalid("JSON declared, text sent", "body", data_content_type="application/json", data="not json"),
    invalid("nested 65 levels", "body", data=nested(65)),
    invalid("an extension name with an underscore", "ce-has_underscore", extensions={"has_underscore": "x"}),
    invalid("an extension name of 21 characters", "ce-" + "x" * 21, extensions={"x" * 21: "x"}),
    invalid("a control character in an extension", "ce-region", extensions={"region": "b\u0000r"}),
]
# Invalid UTF-8 inside a JSON string: carried in base64.
bad = invalid("invalid UTF-8 inside a JSON string", "body")
del bad["event"]["data"]
bad["event"]["data_base64"] = base64.b64encode(b'{"a":"\xff"}').decode()
cases.append(bad)

out = pathlib.Path(__file__).with_name("publish.json")
out.write_text(json.dumps({"time": TIME, "events": cases}, indent=2, ensure_ascii=False) + "\n")
