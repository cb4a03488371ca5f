# shellcheck shell=bash
# What the operator benches share (sourced after scripts/lib/common.sh and stdout_is_data,
# from the repository's root): the Kubernetes test binaries, then one test binary of
# operator/tests built and run, only its figure lines on stdout.

# operator_bench PROFILE TEST KEY TITLE FAILED [ARG...]: builds operator/tests/TEST.rs with
# cargo profile PROFILE and runs it with ARGs; its lines starting with KEY= are the figures
# (emitted to stdout), the others join stderr. When the test fails: FAILED, and exit 1.
operator_bench() {
	local profile=$1 test=$2 key=$3 title=$4 failed=$5 status=0
	shift 5
	step "Kubernetes test binaries (kube-apiserver, kubectl)"
	scripts/k8s/install-deps.sh
	scripts/k8s/build.sh kube-apiserver kubectl
	timed k8s

	step "building operator/tests/$test.rs ($profile)"
	cargo test --profile "$profile" --locked -p wsload-operator --test "$test" --no-run
	timed build

	step "$title"
	cargo test --profile "$profile" --locked -p wsload-operator --test "$test" -- "$@" |
		while IFS= read -r line; do
			if [[ $line == "$key"=* ]]; then
				emit "$line"
			else
				printf '%s\n' "$line"
			fi
		done || status=$?
	timed run
	log "times: ${TIMES[*]}"
	((status == 0)) || fail "$failed (exit $status): see above"
}
