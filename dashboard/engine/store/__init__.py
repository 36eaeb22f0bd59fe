"""The store floor: content-addressed Parquet tables with a SQLite catalog, the kept analyses, the
ingest of folders. Imports only the floors below it.
"""
