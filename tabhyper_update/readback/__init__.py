"""The read-back: VizQL Data Service queries, values compared as their source means them,
drift reports, checking an update by its keys, and reconciling a data source with its
source. Imports the layers below it (values, local, rest).
"""
