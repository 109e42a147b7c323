"""The pipeline: how results are asked for, scheduled and stored.

The configuration (files, schema, overrides, the runs an experiment expands into) and the typed
run settings, the CLI, where every result lives (`layout`) and each stage's command, the
launcher with its GPU slots and fork server, the DVC generator, run-directory locks, resource
limits, atomic writes, the errors a user can fix, and the console line. It is the torch-free
ground both other wings stand on, and the CLI at its top calls into both.
"""
