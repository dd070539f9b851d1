"""tenants and principals

Plans get a tenant (existing rows: ``default``); ``task_id`` becomes unique per tenant
instead of globally; tenant listings get their indexes; principals (token holders,
token stored as a SHA-256 hash) get a table.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import storage.models

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('plans') as batch:
        batch.add_column(sa.Column('tenant', sa.String(length=64), server_default='default', nullable=False))
        batch.drop_constraint('uq_plans_task_id', type_='unique')
        batch.create_unique_constraint('uq_plans_tenant_task_id', ['tenant', 'task_id'])
    op.create_index('ix_plans_tenant_created_at', 'plans', ['tenant', 'created_at'], unique=False)
    op.create_index('ix_plans_tenant_status', 'plans', ['tenant', 'status'], unique=False)
    op.create_table('principals',
    sa.Column('id', sa.String(length=16), nullable=False),
    sa.Column('name', sa.String(length=80), nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=False),
    sa.Column('scopes', sa.JSON(), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', storage.models.UTCDateTime(), nullable=False),
    sa.Column('revoked_at', storage.models.UTCDateTime(), nullable=True),
    sa.Column('last_used_at', storage.models.UTCDateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_principals'))
    )
    op.create_index(op.f('ix_principals_tenant'), 'principals', ['tenant'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_principals_tenant'), table_name='principals')
    op.drop_table('principals')
    op.drop_index('ix_plans_tenant_status', table_name='plans')
    op.drop_index('ix_plans_tenant_created_at', table_name='plans')
    with op.batch_alter_table('plans') as batch:
        batch.drop_constraint('uq_plans_tenant_task_id', type_='unique')
        batch.create_unique_constraint('uq_plans_task_id', ['task_id'])
        batch.drop_column('tenant')
