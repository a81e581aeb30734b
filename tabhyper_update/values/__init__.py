"""Values: the bottom layer, importing nothing else of the package.

The exception tree and the scrubbing of secrets; action batches and their conditions; the
change-set model; the payload's parts as values; change positions; retry and poll policies;
Spark SQL names and literals.
"""
