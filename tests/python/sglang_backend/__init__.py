"""The SGLang HiCache backend suite (a package, so that its conftest never shadows tests/python/conftest.py)."""
