"""The binding-facing edge: the only package that imports pyzmq, asyncpg, sqlalchemy or
trio-asyncio (specs/boundaries.md). The transport and the store land here (issues 3 and 4).
"""
