"""Test helpers that ship with hostd so driver distributions can use them in their own tests.

- `hostd.testing.conformance`: the driver conformance suite every driver must pass.
- `hostd.testing.processes`: checks that no driver process outlives a test.
"""
