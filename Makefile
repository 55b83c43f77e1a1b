# The two commands a user needs: `make run` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run test clean

install: $(STAMP)

# Re-install only when the project's dependencies change.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: install
	$(VENV)/bin/pulsegraph run

test: install
	$(PY) -m pytest

clean:
	rm -rf $(VENV) data .pytest_cache
