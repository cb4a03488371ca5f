#!/usr/bin/env python3
"""Kubernetes OpenAPI -> kubeconform's JSON-schema layout, offline.

kubeconform validates each manifest against `<kind><suffix>.json` found through a
`-schema-location` template (`DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json`); its own
default downloads them from GitHub, which no project machine can reach. This makes the same
files from what a real API server says about itself:

  openapi2jsonschema.py openapi OPENAPI_V2.json OUT_DIR   the built-in kinds, from /openapi/v2
  openapi2jsonschema.py crds CRD_LIST.json OUT_DIR        custom kinds, from `kubectl get crd -o json`

The logic is openapi2jsonschema's (instrumenta, and yannh's fork that builds kubeconform's
schemas) with `--expanded --kubernetes --stand-alone --strict`:
  - one file per group/version/kind, named `<kind>[-<group's first label>]-<version>.json`,
    lower case (`deployment-apps-v1.json`, `service-v1.json`, `loadtest-wsload-v1alpha1.json`);
  - stand-alone: no reference leaves the file. Referenced definitions are copied under the
    file's `definitions` and refs point there (the originals inline them, which cannot end on
    recursive types such as JSONSchemaProps);
  - strict: every object schema that lists `properties` (and says nothing of
    `additionalProperties`) gets `additionalProperties: false`, so a misspelt field is an
    error, as `kubectl apply` with server-side field validation makes it; objects marked
    `x-kubernetes-preserve-unknown-fields` stay open;
  - IntOrString accepts a string or an integer, Quantity a string or a number (what the API
    server decodes), `x-kubernetes-int-or-string` likewise;
  - `apiVersion` and `kind` are restricted to the values of the kind's group/version/kind.
The files declare JSON Schema draft-04, the dialect OpenAPI's schema objects follow (a boolean
`exclusiveMinimum`, as the LoadTest CRD has, does not compile as draft-07; kubeconform then
reports the kind's schema as missing rather than saying why). Unlike openapi2jsonschema, a null where the API has a scalar is refused (the chart never
renders one), which only makes the check stricter.

Standard library only: the input is JSON, straight from the API server.
"""

import json
import os
import sys

REF_PREFIX = "#/definitions/"


def file_name(group, version, kind):
    # kubeconform's KindSuffix: "-" + the first dot-separated label of the group (if any) +
    # "-" + the version; the kind in lower case.
    suffix = "-" + group.split(".")[0] + "-" + version if group else "-" + version
    return (kind + suffix).lower() + ".json"


def strict(node):
    """additionalProperties: false on objects with properties, recursively."""
    if isinstance(node, dict):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            strict(value)
    elif isinstance(node, list):
        for value in node:
            strict(value)
    return node


def int_or_string(node):
    """`format: int-or-string` (OpenAPI v2) and `x-kubernetes-int-or-string` (CRDs)."""
    if isinstance(node, dict):
        if node.get("format") == "int-or-string" or (
            node.get("x-kubernetes-int-or-string") and "anyOf" not in node and "oneOf" not in node
        ):
            keep = {k: v for k, v in node.items() if k in ("description",)}
            node.clear()
            node.update(keep)
            node["oneOf"] = [{"type": "string"}, {"type": "integer"}]
            return node
        for value in node.values():
            int_or_string(value)
    elif isinstance(node, list):
        for value in node:
            int_or_string(value)
    return node


def refs_in(node, found):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            found.add(ref[len(REF_PREFIX):])
        for value in node.values():
            refs_in(value, found)
    elif isinstance(node, list):
        for value in node:
            refs_in(value, found)


def closure(definitions, name):
    """Names of every definition reachable from `name` (itself excluded)."""
    seen, todo = set(), [name]
    while todo:
        found = set()
        refs_in(definitions[todo.pop()], found)
        for ref in found - seen:
            if ref not in definitions:
                sys.exit(f"openapi2jsonschema: {name} refers to missing definition {ref}")
            seen.add(ref)
            todo.append(ref)
    seen.discard(name)
    return seen


def gvk_values(gvk):
    group, version = gvk.get("group", ""), gvk["version"]
    return (group + "/" + version) if group else version, gvk["kind"]


def restrict_type_meta(schema, api_version, kind):
    props = schema.get("properties", {})
    if "apiVersion" in props:
        props["apiVersion"] = dict(props["apiVersion"], enum=[api_version])
    if "kind" in props:
        props["kind"] = dict(props["kind"], enum=[kind])


def write(out_dir, name, schema):
    path = os.path.join(out_dir, name)
    with open(path + ".tmp", "w") as f:
        json.dump(schema, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def from_openapi(spec, out_dir):
    definitions = spec.get("definitions")
    if not isinstance(definitions, dict) or not definitions:
        sys.exit("openapi2jsonschema: no definitions: is this /openapi/v2 of an API server?")
    definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {
        "oneOf": [{"type": "string"}, {"type": "integer"}]
    }
    # The API server decodes a number as a Quantity (cpu: 1), and every Kubernetes tool accepts it.
    definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {
        "oneOf": [{"type": "string"}, {"type": "number"}]
    }
    for d in definitions.values():
        int_or_string(d)
        strict(d)
    written = 0
    for name, definition in sorted(definitions.items()):
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            api_version, kind = gvk_values(gvk)
            schema = json.loads(json.dumps(definition))
            restrict_type_meta(schema, api_version, kind)
            deps = closure(definitions, name)
            if deps:
                schema["definitions"] = {dep: definitions[dep] for dep in sorted(deps)}
            schema["$schema"] = "http://json-schema.org/draft-04/schema#"
            write(out_dir, file_name(gvk.get("group", ""), gvk["version"], kind), schema)
            written += 1
    return written


def from_crds(doc, out_dir):
    items = doc.get("items", [doc]) if isinstance(doc, dict) else []
    written = 0
    for crd in items:
        if crd.get("kind") != "CustomResourceDefinition":
            sys.exit("openapi2jsonschema: expected CustomResourceDefinitions, got " + str(crd.get("kind")))
        spec = crd["spec"]
        for v in spec["versions"]:
            schema = v.get("schema", {}).get("openAPIV3Schema")
            if not schema:
                sys.exit(f"openapi2jsonschema: {crd['metadata']['name']} {v['name']} has no openAPIV3Schema")
            schema = json.loads(json.dumps(schema))
            int_or_string(schema)
            strict(schema)
            # A CRD's schema may leave apiVersion/kind/metadata out; the server always has them.
            props = schema.setdefault("properties", {})
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props.setdefault("metadata", {"type": "object"})
            restrict_type_meta(schema, spec["group"] + "/" + v["name"], spec["names"]["kind"])
            schema["$schema"] = "http://json-schema.org/draft-04/schema#"
            write(out_dir, file_name(spec["group"], v["name"], spec["names"]["kind"]), schema)
            written += 1
    return written


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("openapi", "crds"):
        sys.exit(__doc__.split("\n\n")[1] + "\nusage: openapi2jsonschema.py openapi|crds INPUT.json OUT_DIR")
    mode, source, out_dir = sys.argv[1:]
    with open(source) as f:
        doc = json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    n = from_openapi(doc, out_dir) if mode == "openapi" else from_crds(doc, out_dir)
    if n == 0:
        sys.exit(f"openapi2jsonschema: {source} yielded no schema")
    print(f"openapi2jsonschema: {n} schemas from {source} in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
