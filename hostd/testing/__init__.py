"""Test helpers that ship with hostd so driver distributions can use them in their own tests.

- `hostd.testing.conformance`: the driver conformance suite every driver must pass.
- `hostd.testing.plugin`: that suite as a pytest plugin (entry point `pytest11`): a test that
  asks for the `hostd_conformance` fixture runs once per check.
- `hostd.testing.processes`: checks that no driver process outlives a test.
"""
