"""The DuckDB warehouse file: sessions (read-only and the published working copy), an
ingest's append, the schema (migrations, views), derived tables, read-only catalog
questions, forget.
"""
