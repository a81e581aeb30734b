"""REST: the transport, credentials and settings, the session (sign-in, calls, listings)
and one module per resource an update uses: projects, data sources, uploads, the update
request, jobs. Imports only :mod:`tabhyper_update.values`.
"""
