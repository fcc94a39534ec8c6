# Two entry points a person needs: `make run` and `make test`. Everything else is their plumbing.
PY    ?= python3
VENV  ?= .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test services k8s bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	# torch first, pinned: PyPI's 2.13.0 build (about 3 GB with its CUDA libraries; it runs on the CPU here); the
	# project's range (<2.15) then adds nothing
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[daemon,dev]'
	touch $(STAMP)

install: $(STAMP)

## install, then run the daemon on the embedded simulated cluster (Ctrl-C stops it)
run: install
	$(BIN)/gpu-autoscaler run --sim

## the Debian servers the integration tests start on 127.0.0.1
services:
	bash scripts/install-services.sh

## the Kubernetes control plane the tests start (kube-apiserver, etcd, kwok, Kueue...), built once from the Go
## module proxy into ~/.cache/gpu-autoscaler/k8s and reused after; it prints how long it took
k8s:
	bash scripts/build-k8s.sh

## install everything, then the whole test suite
test: install services k8s
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python bench/forecast_bench.py
	$(BIN)/python bench/policy_bench.py
	$(BIN)/python bench/replay_bench.py
	nice -n 10 $(BIN)/python bench/cycle_bench.py --tenants 1000 --days 2
	$(BIN)/python bench/failover_bench.py
	$(BIN)/python bench/ha_bench.py

clean:
	rm -rf $(VENV) state .pytest_cache
