"""briefing: documents, chunks and their full-text search

Revision ID: 0003
Revises: 0001
Create Date: 2026-12-01 00:00:00

Self-contained: it adds two tables and, per dialect, the search structure that
``storage.briefings.search`` queries — on Postgres a generated ``tsvector`` column with
a GIN index, on SQLite an FTS5 table kept in step with ``chunks`` by triggers (so the
index is written in the same transaction as the chunks). Those search structures are
not in the models' metadata (``storage.models.in_models`` leaves them out of the
migration-vs-models comparison).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import storage.models

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')

PG_SEARCH = """
ALTER TABLE chunks ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english'::regconfig, heading_path::text), 'A')
    || setweight(to_tsvector('english'::regconfig, text), 'B')
) STORED
"""

SQLITE_SEARCH = (
    """CREATE VIRTUAL TABLE chunks_fts USING fts5(
        heading_path, text, content='chunks', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, heading_path, text) VALUES (new.id, new.heading_path, new.text);
    END""",
    """CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, heading_path, text)
        VALUES ('delete', old.id, old.heading_path, old.text);
    END""",
    """CREATE TRIGGER chunks_fts_update AFTER UPDATE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, heading_path, text)
        VALUES ('delete', old.id, old.heading_path, old.text);
        INSERT INTO chunks_fts(rowid, heading_path, text) VALUES (new.id, new.heading_path, new.text);
    END""",
)


def upgrade() -> None:
    op.create_table('documents',
    sa.Column('id', BIG_ID, autoincrement=True, nullable=False),
    sa.Column('plan_id', sa.String(length=36), nullable=False),
    sa.Column('doc_id', sa.String(length=60), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('title', sa.String(length=300), nullable=False),
    sa.Column('format', sa.String(length=12), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('length', sa.Integer(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('created_at', storage.models.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], name=op.f('fk_documents_plan_id_plans'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_documents')),
    sa.UniqueConstraint('plan_id', 'doc_id', name='uq_documents_plan_doc')
    )
    op.create_table('chunks',
    sa.Column('id', BIG_ID, autoincrement=True, nullable=False),
    sa.Column('plan_id', sa.String(length=36), nullable=False),
    sa.Column('document_id', BIG_ID, nullable=False),
    sa.Column('doc_id', sa.String(length=60), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('start_utf16', sa.Integer(), nullable=False),
    sa.Column('end_utf16', sa.Integer(), nullable=False),
    sa.Column('heading_path', sa.JSON(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('tokens', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['document_id'], ['documents.id'], name=op.f('fk_chunks_document_id_documents'),
                            ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], name=op.f('fk_chunks_plan_id_plans'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_chunks')),
    sa.UniqueConstraint('plan_id', 'doc_id', 'ordinal', name='uq_chunks_plan_doc_ordinal')
    )
    op.create_index(op.f('ix_chunks_document_id'), 'chunks', ['document_id'], unique=False)
    if op.get_bind().dialect.name == 'postgresql':
        op.execute(PG_SEARCH)
        op.execute('CREATE INDEX ix_chunks_search ON chunks USING gin (search)')
    else:
        for statement in SQLITE_SEARCH:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        for name in ('chunks_fts_update', 'chunks_fts_delete', 'chunks_fts_insert'):
            op.execute(f'DROP TRIGGER IF EXISTS {name}')
        op.execute('DROP TABLE IF EXISTS chunks_fts')
    op.drop_index(op.f('ix_chunks_document_id'), table_name='chunks')
    op.drop_table('chunks')
    op.drop_table('documents')
