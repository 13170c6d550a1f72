# vramgate developer entry points. Everything installs itself into .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: all setup serve test unit e2e e2e-bin e2e-node node-deps node-images lint bench bench-cluster kwok-bin chart clean browser screenshots demo

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## serve: run the service over HTTPS on :8443 against the bundled sample inventory (no cluster needed)
serve: $(STAMP)
	$(BIN)/vramgate serve --dev --nodes examples/cluster.yaml --port 8443

## test: the whole suite — unit, HTTP, chart, end-to-end and the chart on a real node (builds the control
## plane, kubelet and the images on first run; installs the node's Debian packages as root)
test: $(STAMP) e2e-bin chart browser node-images
	$(BIN)/pytest tests -q

unit: $(STAMP)
	$(BIN)/pytest tests -q -m "not e2e"

## e2e-bin: the control plane (Kubernetes, etcd), Karpenter's KWOK provider and KWOK, from the Go module proxy
e2e-bin:
	bash tests/e2e/build.sh
	bash tests/e2e/karpenter/build.sh
	bash bench/cluster/build_kwok.sh

## chart: install helm (Go module proxy) into .cache/bin for the chart tests
chart:
	bash tests/chart/install_helm.sh

e2e: $(STAMP) e2e-bin chart
	$(BIN)/pytest tests/e2e -q -m "e2e and not e2e_node"

## node-deps: Debian's containerd, runc, CNI plugins, iptables/nftables, buildah, mmdebstrap (as root)
NODE_DEBS := containerd runc containernetworking-plugins iptables nftables buildah mmdebstrap gcc libc6-dev
node-deps:
	@missing=$$(for p in $(NODE_DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; fi

## node-images: the vramgate image from the Dockerfile (buildah, Debian python base), kube-scheduler and pause
node-images: node-deps e2e-bin
	bash tests/e2e/node/build_images.sh

## e2e-node: only the real-node scenarios (helm install on kubelet + containerd)
e2e-node: $(STAMP) chart node-images
	$(BIN)/pytest tests/e2e/node -q -m e2e_node

lint: $(STAMP)
	$(BIN)/ruff check webhook tests bench
	$(BIN)/mypy

## demo: the e2e control plane with the bundled GPU nodes and vramgate registered from the chart, until Ctrl-C
demo: $(STAMP) e2e-bin chart
	$(BIN)/python -m tests.e2e.demo

## browser: Debian's Chromium and its driver for the status page's browser test (as root; CI runs it)
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; }

## screenshots: regenerate docs/status-page*.png from the browser test
screenshots: $(STAMP) browser
	VRAMGATE_SCREENSHOTS_DIR=docs $(BIN)/pytest tests/admission/test_status_browser.py -q

bench: $(STAMP)
	$(BIN)/python -m bench

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

kwok-bin:
	bash bench/cluster/build_kwok.sh

## bench-cluster: KWOK fleet of 1k/2k/5k GPU nodes in the e2e control plane: scheduler throughput with and
## without the extender, API-server create latency with and without the webhooks (minutes; not in `make test`)
BENCH_CLUSTER_ARGS ?=
bench-cluster: $(BENCH_STAMP) e2e-bin chart kwok-bin
	$(BIN)/python -m bench.cluster.run --plot docs/img/scaling.png $(BENCH_CLUSTER_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
