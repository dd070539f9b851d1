"""The list of the caller's plans (``/ui/``): newest first, a page at a time, from the
same keyset listing as ``GET /v1/plans`` (:func:`storage.listing.list_plans`, through
the coordinator with the caller's principal, so it holds only what the caller may see)."""

from __future__ import annotations

from urllib.parse import quote

from markupsafe import Markup

from orchestrator.api.ui.html import badge, join, moment, page
from storage.identity import Principal
from storage.listing import Page, PlanSummary

PAGE_SIZE = 50


def listing_page(found: Page, *, viewer: Principal | None, auth: bool, paged: bool) -> str:
    every_tenant = viewer is None or viewer.reach is None  # the operator or an admin: show whose plan it is
    if found.plans:
        head = Markup("<tr><th>Plan</th><th>Status</th><th>Kind</th>{tenant}<th>Labels</th><th>Created</th>"
                      "<th>Finished</th></tr>").format(tenant=Markup("<th>Tenant</th>") if every_tenant else "")
        rows = join(_row(p, every_tenant) for p in found.plans)
        table = Markup('<table class="plans"><thead>{head}</thead><tbody>{rows}</tbody></table>').format(
            head=head, rows=rows)
    else:
        table = Markup('<p class="empty">No plans {more}. Submit one with '
                       '<code>conclave submit examples/board.yaml --url …</code> and it appears here.</p>').format(
            more="on this page" if paged else "yet")
    pages = Markup("")
    if paged or found.next_cursor:
        links = [Markup('<a href="/ui/">Newest</a>')] if paged else []
        if found.next_cursor:
            links.append(Markup('<a rel="next" href="/ui/?cursor={}">Older plans →</a>').format(
                quote(found.next_cursor, safe="")))
        pages = Markup('<nav class="pages">{}</nav>').format(join(links, " "))
    body = Markup('<section class="listing"><h1>Plans</h1>{table}{pages}</section>').format(table=table, pages=pages)
    return page("Plans", body, viewer=viewer, auth=auth)


def _row(p: PlanSummary, every_tenant: bool) -> Markup:
    labels = join((Markup('<span class="label">{}</span>').format(x) for x in p.labels), " ")
    return Markup('<tr data-plan="{id}"><td><a href="/ui/plans/{id}">{title}</a>{task}</td><td>{status}</td>'
                  '<td>{kind}</td>{tenant}<td>{labels}</td><td>{created}</td><td>{finished}</td></tr>').format(
        id=p.id, title=p.title or p.id,
        task=Markup(' <code class="task">{}</code>').format(p.task_id) if p.task_id else "",
        status=badge(p.status), kind=p.kind,
        tenant=Markup("<td>{}</td>").format(p.tenant) if every_tenant else "", labels=labels,
        created=moment(p.created_at.isoformat()),
        finished=moment(p.finished_at.isoformat() if p.finished_at else None))
