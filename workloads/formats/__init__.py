"""Trace importers in files of their own.

`workloads.importers` imports every module of this package when it is imported. A module here reads
one format into a `workloads.importers.SourceTrace` and registers it with
`workloads.importers.register_format(name, reader, csv_columns=... or json_keys=...)`; the format is
then one that `infersim trace convert --format` and `read_source` accept and `detect_format`
recognises. docs/contributing.md shows one.
"""
