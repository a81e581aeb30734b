"""The update workflows: the options of an update, its records and identity, its target,
the chain part by part (``upload().apply()``), its result, publishing and bootstrapping.
Imports the layers below it (values, local, rest, readback).
"""
