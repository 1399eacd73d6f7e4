# tether — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

NODES ?= 3
CARGO ?= cargo
# Where the Kubernetes binaries are cached (see e2e/scripts/lib.sh).
BIN_DIR := $(shell bash -c 'source e2e/scripts/lib.sh && echo $$BIN_DIR')
KUBECONFIG_FILE := $(CURDIR)/.cluster/kubeconfig
KUBECTL := $(BIN_DIR)/kubectl --kubeconfig=$(KUBECONFIG_FILE)
export TETHER_KUBECONFIG := $(KUBECONFIG_FILE)
export TETHER_KUBECTL := $(BIN_DIR)/kubectl

.PHONY: help build image image-arm64-check demo-bins demo-tether demo-k8s fmt fmt-check lint unit fuzz crds crds-check chart-check monitoring-check monitoring-sync k8s-bins cluster cluster-down e2e fidelity test-matrix test demo demo-kueue soak bench bench-scale bench-sweep

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

build: ## build the tether binary (target/release/tether; the image and the bench build the fat-LTO `dist` profile)
	$(CARGO) build --release --bin tether

IMAGE ?= tether:latest
image: ## build the container image $(IMAGE) FROM scratch, static and reproducible, its SBOM beside it (scripts/image.sh: docker when its daemon answers, podman or buildah; no registry needed; PROFILE=release for a faster build)
	scripts/image.sh $(IMAGE)

image-arm64-check: ## cross-build the arm64 image here (ARCH=arm64 scripts/image.sh) and run its binary under qemu-user (e2e/tests/image.rs, ignored in make test: minutes)
	$(CARGO) test -p tether-e2e --test image -- --ignored --test-threads=1 the_arm64_image

fmt: ## format the code
	$(CARGO) fmt --all

fmt-check: ## fail when the code is not formatted
	$(CARGO) fmt --all -- --check

lint: ## clippy over every target, warnings denied
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit: ## unit tests (includes the crds/ drift check), the layers of src/, the generated-input properties, and the e2e harness's own unit tests (its readers and reports)
	$(CARGO) test --lib --bins --test layers --test properties
	$(CARGO) test -p tether-e2e --lib

fuzz: ## the generated-input properties (tests/properties.rs), 200,000 cases each (about a minute each)
	PROPTEST_CASES=$${PROPTEST_CASES:-200000} $(CARGO) test --release --test properties

crds: ## regenerate crds/ (and its copies in deploy/crds/ and charts/tether/crds/) and docs/reference.md from src/api
	$(CARGO) run --quiet --bin tether -- crd > crds/tether.dev.yaml
	$(CARGO) run --quiet --bin tether -- crd --reference > docs/reference.md
	cp crds/tether.dev.yaml deploy/crds/tether.dev.yaml
	cp crds/tether.dev.yaml charts/tether/crds/tether.dev.yaml

crds-check: ## fail when crds/ (or a copy) or docs/reference.md is stale
	$(CARGO) test --lib -- api::tests::crds_directory_is_up_to_date api::tests::the_api_reference_is_up_to_date

monitoring-check: ## promtool (built once into the cache) checks deploy/monitoring/alerts.yaml and runs its tests; the chart's copy must match
	e2e/scripts/monitoring.sh check

monitoring-sync: ## write charts/tether/files/alerts.yaml from deploy/monitoring/alerts.yaml
	e2e/scripts/monitoring.sh sync

chart-check: k8s-bins ## fail when charts/tether and deploy/ hold different objects, or helm lint fails (no cluster needed)
	$(CARGO) test -p tether-e2e --test chart -- --skip on_the_cluster

k8s-bins: ## build (or reuse) the cached Kubernetes binaries
	e2e/scripts/build-k8s.sh
	e2e/scripts/build-helm.sh

cluster: ## start the local control plane (NODES=3; ETCD_TMPFS=1 keeps etcd's data in memory; KUEUE=1 starts Kueue beside it), kubeconfig in .cluster/kubeconfig
	NODES=$(NODES) e2e/scripts/cluster-up.sh

cluster-down: ## stop the local control plane and remove its state
	e2e/scripts/cluster-down.sh

# The e2e test files that share the tether `make e2e` starts. fidelity.rs, dra.rs and batching.rs
# compare tether with kube-scheduler on a cluster no other test changes (batching.rs: kube-scheduler's
# batches end when another test's pod comes), so they run alone after them; so does
# explain.rs (it compares counts over the whole cluster and predicts from a snapshot). faults.rs runs a
# tether of its own behind a proxy and restarts kube-apiserver, and ha.rs runs two replicas of
# its own behind a Lease, sampling.rs a tether of its own that must start afresh (its window
# begins at the first node), and bench.rs (a small run of the bench) starts schedulers of its own,
# so they run last, alone, one test at a time. So do image.rs (it runs tether from the image
# scripts/image.sh builds), chart.rs (it installs a tether of its own with Helm: charts/tether,
# helm from e2e/scripts/build-helm.sh) and release.rs (scripts/release.sh for this machine's
# architecture, the workflow through actionlint, the plugin through krew; its tools from
# e2e/scripts/build-release-tools.sh). kueue.rs starts a real Kueue (built before the tests, by
# e2e/scripts/build-kueue.sh, cached) beside the shared tether.
E2E_SHARED := $(filter-out faults ha sampling image chart release fidelity dra batching explain quickstart soak bench,$(basename $(notdir $(wildcard e2e/tests/*.rs))))

e2e: ## end-to-end tests: starts tether on `make cluster` (fails when it is not up)
	$(CARGO) build --bin tether
	e2e/scripts/build-helm.sh
	e2e/scripts/build-kueue.sh
	e2e/scripts/build-release-tools.sh >/dev/null
	e2e/scripts/tether-up.sh
	@status=0; $(CARGO) test -p tether-e2e $(addprefix --test ,$(E2E_SHARED)) -- --test-threads=4 || status=$$?; \
	if [ $$status -eq 0 ]; then \
	  $(CARGO) test -p tether-e2e --test fidelity --test dra --test batching -- --nocapture --test-threads=1 || status=$$?; \
	fi; \
	if [ $$status -eq 0 ]; then \
	  $(CARGO) test -p tether-e2e --test explain --test quickstart -- --test-threads=1 || status=$$?; \
	fi; \
	e2e/scripts/tether-down.sh; \
	if [ $$status -ne 0 ]; then echo "tether's log: .cluster/logs/tether.log"; exit $$status; fi; \
	$(CARGO) test -p tether-e2e --test faults --test ha --test sampling --test image --test chart --test release -- --test-threads=1 || { \
	  echo "the fault and HA tests' tether logs: .cluster/logs/tether-*.log"; exit 1; }
	TETHER_BIN=$(CURDIR)/target/debug/tether $(CARGO) test -p tether-e2e --test bench -- --test-threads=1 --nocapture
	$(CARGO) test -p tether-e2e --test soak -- --test-threads=1 --nocapture

# The bench's control plane (bench, bench-sweep): the local one when it is up, else started
# (etcd in memory, kwok's node leases at 600 s) and stopped after; tether's CRDs installed by
# starting and stopping the shipped build once. BENCH_VERSIONS names what ran, for the tables.
BENCH_CLUSTER_UP = started=false; \
	if ! $(KUBECTL) get --raw=/readyz >/dev/null 2>&1; then \
	  started=true; ETCD_TMPFS=$${ETCD_TMPFS:-1} NODE_LEASE_SECONDS=$${NODE_LEASE_SECONDS:-600} NODES=$(NODES) e2e/scripts/cluster-up.sh; \
	fi; \
	TETHER_BIN=$(CURDIR)/target/dist/tether e2e/scripts/tether-up.sh >/dev/null; e2e/scripts/tether-down.sh >/dev/null
BENCH_CLUSTER_DOWN = if $$started; then e2e/scripts/cluster-down.sh --keep-logs; fi
BENCH_VERSIONS = $$(basename $$(dirname $(BIN_DIR)) | sed 's/^k8s-/Kubernetes /; s/-etcd-/, etcd /; s/-kwok-/, kwok /'), tether $$(git describe --always --dirty)

BENCH_NODES ?= 500
BENCH_PODS ?= 5000
BENCH_RATE ?= 100
BENCH_READY_NODES ?= 5000
BENCH_SCALE_NODES ?= 5000
BENCH_SCALE_PODS ?= 0
BENCH_SCALE_KEEP ?= 0
BENCH_KUEUE_JOBS ?= 1000
bench: ## the criterion cycle benches (5,000 nodes; DRA on 1,000), then kube-scheduler, tether and a raw binder side by side (BENCH_NODES, BENCH_PODS, BENCH_RATE), each one's start on BENCH_READY_NODES nodes, BENCH_KUEUE_JOBS Jobs of 4 pods through Kueue (quota for a tenth) with each, BENCH_GANGS gangs of 16, BENCH_CLAIM_PODS pods with a GPU claim each (DRA), and with BENCH_SCALE_PODS (e.g. 100000) the scale run on BENCH_SCALE_NODES; writes BENCHMARKS.md and target/bench/*.json
	$(CARGO) bench --bench schedule_cycle --bench dra_cycle
	$(CARGO) build --profile dist --bin tether
	$(MAKE) --no-print-directory k8s-bins
	@set -e; $(BENCH_CLUSTER_UP); \
	status=0; TETHER_BIN=$(CURDIR)/target/dist/tether BENCH_NODES=$(BENCH_NODES) BENCH_PODS=$(BENCH_PODS) BENCH_RATE=$(BENCH_RATE) BENCH_READY_NODES=$(BENCH_READY_NODES) BENCH_SCALE_NODES=$(BENCH_SCALE_NODES) BENCH_SCALE_PODS=$(BENCH_SCALE_PODS) BENCH_SCALE_KEEP=$(BENCH_SCALE_KEEP) BENCH_KUEUE_JOBS=$(BENCH_KUEUE_JOBS) \
	  BENCH_VERSIONS="$(BENCH_VERSIONS)" \
	  $(CARGO) test --release -p tether-e2e --test bench -- --ignored --nocapture --test-threads=1 || status=$$?; \
	$(BENCH_CLUSTER_DOWN); \
	exit $$status

bench-scale: ## the scale run alone: kube-scheduler then tether, each started against BENCH_SCALE_PODS pending pods (100000 unless told) on BENCH_SCALE_NODES nodes of 50 images, then kube-apiserver killed under it (e.g. BENCH_SCALE_NODES=15000 BENCH_SCALE_PODS=150000: about 80 minutes here); its table into BENCHMARKS.md
	$(CARGO) build --profile dist --bin tether
	$(MAKE) --no-print-directory k8s-bins
	@set -e; $(BENCH_CLUSTER_UP); \
	status=0; TETHER_BIN=$(CURDIR)/target/dist/tether BENCH_SCALE_NODES=$(BENCH_SCALE_NODES) BENCH_SCALE_PODS=$(if $(filter 0,$(BENCH_SCALE_PODS)),100000,$(BENCH_SCALE_PODS)) BENCH_SCALE_KEEP=$(BENCH_SCALE_KEEP) \
	  BENCH_VERSIONS="$(BENCH_VERSIONS)" \
	  $(CARGO) test --release -p tether-e2e --test bench -- --ignored --exact start_and_restart_at_scale --nocapture || status=$$?; \
	$(BENCH_CLUSTER_DOWN); \
	exit $$status

BENCH_SWEEP_NODES ?= 500,1000,5000,15000
BENCH_SWEEP_PODS ?= 5000
bench-sweep: ## kube-scheduler, tether and the raw binder against the number of nodes (BENCH_SWEEP_NODES, BENCH_SWEEP_PODS pods of SchedulingBasic each): a table in BENCHMARKS.md, target/bench/sweep.json, and the plot docs/bench/sweep.png (matplotlib, pinned in e2e/plot/requirements.txt)
	$(CARGO) build --profile dist --bin tether
	$(MAKE) --no-print-directory k8s-bins
	@set -e; $(BENCH_CLUSTER_UP); \
	status=0; TETHER_BIN=$(CURDIR)/target/dist/tether BENCH_SWEEP_NODES=$(BENCH_SWEEP_NODES) BENCH_SWEEP_PODS=$(BENCH_SWEEP_PODS) \
	  BENCH_VERSIONS="$(BENCH_VERSIONS)" \
	  $(CARGO) test --release -p tether-e2e --test bench -- --ignored --exact node_count_sweep --nocapture || status=$$?; \
	$(BENCH_CLUSTER_DOWN); \
	if [ $$status -eq 0 ]; then e2e/scripts/plot-sweep.sh; fi; \
	exit $$status

SOAK_MINUTES ?= 30
SOAK_NODES ?= 200
soak: ## 30 min of churn on 200 nodes against a release build (SOAK_MINUTES, SOAK_NODES; figures in .cluster/logs/soak.txt), then 8 lost terms with 10,000 pending pods and a gang of 5,000 explained beside a 1,000-pod burst
	$(CARGO) build --profile dist --bin tether
	@set -e; started=false; \
	if ! $(KUBECTL) get --raw=/readyz >/dev/null 2>&1; then \
	  started=true; NODES=$(NODES) e2e/scripts/cluster-up.sh; \
	fi; \
	TETHER_BIN=$(CURDIR)/target/dist/tether e2e/scripts/tether-up.sh >/dev/null; e2e/scripts/tether-down.sh >/dev/null; \
	status=0; TETHER_BIN=$(CURDIR)/target/dist/tether SOAK_MINUTES=$(SOAK_MINUTES) SOAK_NODES=$(SOAK_NODES) \
	  $(CARGO) test -p tether-e2e --test soak -- --ignored --nocapture --test-threads=1 || status=$$?; \
	if $$started; then e2e/scripts/cluster-down.sh --keep-logs; fi; \
	exit $$status

# The side-by-side subset (fidelity.rs, dra.rs: tether against kube-scheduler) on the running
# cluster, for one release; `make test` runs it among the rest on the default release.
FIDELITY_TESTS ?= fidelity dra
fidelity: ## tether and kube-scheduler side by side (FIDELITY_TESTS: fidelity.rs, dra.rs) on `make cluster` (K8S_VERSION picks the release)
	$(CARGO) build --bin tether
	e2e/scripts/tether-up.sh
	@status=0; $(CARGO) test -p tether-e2e $(addprefix --test ,$(FIDELITY_TESTS)) -- --nocapture --test-threads=1 || status=$$?; \
	e2e/scripts/tether-down.sh; \
	if [ $$status -ne 0 ]; then echo "tether's log: .cluster/logs/tether.log"; fi; exit $$status

# The other supported releases (`make test` runs on the newest, v1.38.0-beta.0), one after the
# other, each on a control plane of its own built from that release's pinned modules: the
# side-by-side tests, and gang.rs and group_claims.rs where the Workload API is served (1.37 on). Stops a running
# cluster first.
MATRIX_RELEASES ?= v1.36.5 v1.37.2
test-matrix: ## the side-by-side tests against each other supported release (v1.36.5, v1.37.2), each on its own control plane
	@set -e; e2e/scripts/cluster-down.sh >/dev/null 2>&1 || true; \
	for v in $(MATRIX_RELEASES); do \
	  echo "== Kubernetes $$v"; \
	  minor=$$(echo $$v | sed -E 's/^v1\.([0-9]+).*/\1/'); \
	  tests="fidelity dra"; if [ $$minor -ge 37 ]; then tests="fidelity dra gang group_claims"; fi; \
	  K8S_VERSION=$$v e2e/scripts/build-k8s.sh; \
	  K8S_VERSION=$$v NODES=$(NODES) e2e/scripts/cluster-up.sh; \
	  status=0; K8S_VERSION=$$v $(MAKE) --no-print-directory fidelity FIDELITY_TESTS="$$tests" || status=$$?; \
	  K8S_VERSION=$$v e2e/scripts/cluster-down.sh --keep-logs; \
	  if [ $$status -ne 0 ]; then echo "Kubernetes $$v: the side-by-side tests failed (logs in .cluster/logs)"; exit $$status; fi; \
	done

# `make test` starts its own cluster when none is running and stops it afterwards.
test: fmt-check lint unit crds-check monitoring-check ## everything CI runs: fmt, clippy, unit, crds drift, the alerts' tests, e2e
	@set -e; started=false; \
	if ! $(KUBECTL) get --raw=/readyz >/dev/null 2>&1; then \
	  started=true; NODES=$(NODES) e2e/scripts/cluster-up.sh; \
	fi; \
	status=0; $(MAKE) --no-print-directory e2e || status=$$?; \
	if $$started; then \
	  if [ $$status -ne 0 ]; then e2e/scripts/cluster-down.sh --keep-logs; echo "logs kept in .cluster/logs"; \
	  else e2e/scripts/cluster-down.sh; fi; \
	fi; \
	exit $$status

# The demos run the build `make test` runs (the dev profile: three kwok nodes need no optimizer,
# and a first build takes a third of the release profile's time here), compiled while the
# Kubernetes binaries are fetched and built: on two cores the one's downloads overlap the other's
# compiling. A second run reuses both (and `make test` the first's build).
DEMO_BIN := $(CURDIR)/target/debug/tether

demo-bins:
	@$(MAKE) --no-print-directory -j2 demo-tether demo-k8s

demo-tether:
	$(CARGO) build --bin tether

demo-k8s:
	e2e/scripts/build-k8s.sh

demo-kueue: demo-bins ## batch with quotas, the rest through default logic: Kueue admits, tether places, explain says why a pod waits (starts the cluster with Kueue, and tether)
	KUEUE=1 NODES=$(NODES) e2e/scripts/cluster-up.sh
	TETHER_BIN=$(DEMO_BIN) e2e/scripts/tether-up.sh
	TETHER_BIN=$(DEMO_BIN) e2e/scripts/demo-kueue.sh

demo: demo-bins cluster ## build, start the cluster and tether, schedule a Deployment and a sticky StatefulSet, show them, explain one pod
	TETHER_BIN=$(DEMO_BIN) e2e/scripts/tether-up.sh
	$(KUBECTL) apply -f config/samples/
	$(KUBECTL) apply -f config/examples/demo-deployment.yaml
	$(KUBECTL) rollout status deployment/demo-web --timeout=60s
	@echo
	$(KUBECTL) get nodes -L topology.kubernetes.io/zone
	@echo
	$(KUBECTL) get pods -o wide -l app=demo-web
	@echo
	$(KUBECTL) get events --field-selector reason=Scheduled -o custom-columns=REASON:.reason,MESSAGE:.message | tail -n 5
	@echo
	$(KUBECTL) get schedulingprofiles
	@echo
	e2e/scripts/demo-sticky.sh
	@echo
	TETHER_BIN=$(DEMO_BIN) e2e/scripts/demo-explain.sh
	@echo
	@echo "tether runs in the background (log: .cluster/logs/tether.log, metrics: http://127.0.0.1:18080/metrics)."
	@echo "Use the cluster with:"
	@echo "  export KUBECONFIG=$(KUBECONFIG_FILE)"
	@echo "  alias kubectl='$(BIN_DIR)/kubectl'"
	@echo "  kubectl scale deployment demo-web --replicas=20 && kubectl get pods -o wide"
	@echo "Stop everything with: make cluster-down"
