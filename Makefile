# The two commands a user needs: `make run` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run test check docs test-deps clean

install: $(STAMP)

# Re-install only when the project's dependencies change.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: install
	$(VENV)/bin/pulsegraph run

# What the tests need beyond Python packages: Debian's docker-compose (it validates
# docker-compose.yml without a Docker engine), Debian's chromium (the dashboard's browser
# test), Debian's kcat (writes compressed batches in every codec, as a producer outside Python would),
# and a Kafka broker's jars from Maven Central (tools/kafka.sh; needs Java 17 and mvn).
# apt-get runs only for what is missing; CI runs as root on a fresh Debian machine.
test-deps:
	@missing=""; \
	command -v docker-compose >/dev/null || missing="$$missing docker-compose"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	tools/kafka.sh fetch

# The whole suite: what CI runs (.ci/run), real Kafka, Ray and browser tests included, with pytest-xdist:
# each worker has its own broker and Ray instance (the session fixtures, tests/conftest.py) and takes a
# test file at a time, so its module fixtures and the order of its tests stay as written. One worker more
# than this machine's two cores: the integration tests wait on brokers, epochs and paced producers as
# much as they compute (the whole suite took 15:01 with two workers, 12:37 with three). Files are handed out in
# the order tests/conftest.py gives them, the longest first (xdist would order them by their count of tests,
# which leaves the few long tests of a kill or a service restart to the end, one worker busy while two wait).
TEST_WORKERS ?= 3
test: install test-deps
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The quick lane of the edit-test loop, under two minutes (~45 s here, ~65 s with mypy's cache cold):
# the unit and property tests that start no Ray actor, broker or service (pytest -m, see
# tests/conftest.py), with ruff, mypy and import-linter (tests/test_lint.py, tests/test_types.py).
# It needs no Kafka or browser. These tests
# only compute: one worker per core, and BLAS on one thread each (two workers each spinning up a
# thread per core only contend).
CHECK_WORKERS ?= 2
check: install
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	  $(PY) -m pytest -n $(CHECK_WORKERS) -q -m "not integration and not slow" --durations=5

# The documentation site under .cache/site, built strictly (a broken link fails); `mkdocs serve` to browse.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) data .pytest_cache
