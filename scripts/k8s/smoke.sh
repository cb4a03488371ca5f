#!/usr/bin/env bash
# Smoke check of the local Kubernetes harness, end to end, the way operator
# integration tests will use it: build (cached), `control-plane.sh up` in a
# temporary directory, talk to the API server with kubectl, tear down.
#
# What it proves beyond "the API server starts": kubectl parses the server
# version (the version ldflags took), and a CRD shaped like the LoadTest one
# (OpenAPI schema, a CEL x-kubernetes-validations rule, the status subresource,
# printer columns) is enforced by the server: an invalid object is rejected
# with the rule's message, a valid one is stored, status is only writable
# through /status.
#
# Environment:
#   WSLOAD_K8S_KEEP=1  keep the temporary directory (logs, PKI) afterwards;
#                      it is always kept when a check fails
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/k8s/versions.sh
source "$K8S_DIR/versions.sh"

# shellcheck source=scripts/lib/common.sh
source "$K8S_DIR/../lib/common.sh"

NS=wsload-smoke
CRD=widgets.smoke.wsload.dev

started=$SECONDS
step "dependencies and binaries ($K8S_VERSION)"
"$K8S_DIR/install-deps.sh"
t=$SECONDS
"$K8S_DIR/build.sh" kube-apiserver kubectl
printf 'binaries ready in %ss\n' "$((SECONDS - t))"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/wsload-k8s-smoke.XXXXXX")"
CLUSTER="$WORK/cluster"
OK=0
smoke_teardown() {
	step "teardown"
	"$K8S_DIR/control-plane.sh" down "$CLUSTER" || true
	if ((OK)) && [[ "${WSLOAD_K8S_KEEP:-0}" != 1 ]]; then
		rm -rf "$WORK"
	else
		printf 'kept %s (logs: %s/*.log)\n' "$WORK" "$CLUSTER" >&2
	fi
}
at_exit smoke_teardown
trap 'exit 130' INT
trap 'exit 143' TERM

# kubectl's discovery cache defaults to ~/.kube/cache; keep it with the
# cluster so nothing outside WORK is written. kubectl: common.sh's, the one
# build.sh made (K8S_BIN_DIR), pointed at the cluster by `up`'s KUBECONFIG.
export KUBECACHEDIR="$WORK/kube-cache"

step "control plane up"
t=$SECONDS
eval "$("$K8S_DIR/control-plane.sh" up "$CLUSTER")"
printf 'control plane ready in %ss; KUBECONFIG=%s\n' "$((SECONDS - t))" "$KUBECONFIG"

step "kubectl get --raw /readyz"
readyz="$(kubectl get --raw /readyz)"
printf '%s\n' "$readyz"
[[ "$readyz" == ok ]] || fail "/readyz answered '$readyz'"

step "kubectl version"
kubectl version
server="$(kubectl version -o json | sed -n '/"serverVersion"/,/}/s/.*"gitVersion": *"\([^"]*\)".*/\1/p')"
[[ "$server" == "$K8S_VERSION" ]] || fail "server reports version '$server', not $K8S_VERSION"

step "namespace"
kubectl create namespace "$NS"

step "CRD with schema, CEL rule, status subresource, printer columns"
kubectl apply -f - <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $CRD
spec:
  group: smoke.wsload.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - {name: Min, type: integer, jsonPath: .spec.min}
    - {name: Max, type: integer, jsonPath: .spec.max}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [min, max]
            properties:
              min: {type: integer, minimum: 0}
              max: {type: integer}
            x-kubernetes-validations:
            - rule: self.min <= self.max
              message: spec.min must not be greater than spec.max
          status:
            type: object
            properties:
              phase: {type: string, enum: [Pending, Done]}
EOF
wait_until 60 crd_established "$CRD" || fail "crd/$CRD not Established after 60s"

widget() { # name min max
	printf 'apiVersion: smoke.wsload.dev/v1alpha1\nkind: Widget\nmetadata: {name: %s, namespace: %s}\nspec: {min: %s, max: %s}\n' \
		"$1" "$NS" "$2" "$3"
}

step "invalid object is rejected by the CEL rule"
if out="$(widget bad 5 1 | kubectl apply -f - 2>&1)"; then
	fail "min 5 > max 1 was accepted: $out"
fi
printf '%s\n' "$out"
[[ "$out" == *"spec.min must not be greater than spec.max"* ]] || fail "rejected, but not with the CEL message"

step "invalid object is rejected by the OpenAPI schema"
if out="$(widget negative -1 1 | kubectl apply -f - 2>&1)"; then
	fail "min -1 was accepted: $out"
fi
printf '%s\n' "$out"
[[ "$out" == *"should be greater than or equal to 0"* ]] || fail "rejected, but not by the minimum"

step "valid object is accepted"
widget good 1 5 | kubectl apply -f -

step "status only through the status subresource"
kubectl patch -n "$NS" widget good --subresource=status --type=merge -p '{"status":{"phase":"Done"}}'
# Written through the main resource, status must be ignored.
kubectl patch -n "$NS" widget good --type=merge -p '{"status":{"phase":"Pending"}}'
phase="$(kubectl get -n "$NS" widget good -o jsonpath='{.status.phase}')"
[[ "$phase" == Done ]] || fail "status.phase is '$phase', expected Done (status subresource not in effect?)"

step "printer columns"
table="$(kubectl get -n "$NS" widgets)"
printf '%s\n' "$table"
[[ "$(head -n1 <<<"$table")" =~ ^NAME\ +MIN\ +MAX\ +PHASE\ *$ ]] || fail "unexpected columns"
[[ "$(grep "^good " <<<"$table")" =~ ^good\ +1\ +5\ +Done\ *$ ]] || fail "unexpected row for good"

OK=1
printf '\n==> smoke passed in %ss\n' "$((SECONDS - started))"
