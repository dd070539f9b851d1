"""The list of the caller's plans (``/ui/``): newest first, a page at a time, from the
same keyset listing and the same filters as ``GET /v1/plans`` (:class:`PlanQuery`,
through the read side with the caller's principal, so it holds only what the caller may
see). Each row: the plan's short id (the full one on hover and in its link), title,
status, progress (phases done of all), cost in tokens, labels and when it was created.

Filters by status and label are a plain GET form; a label on a row filters by it.
``static/list.js`` refreshes the table in place (``GET /ui/list?…``, the same filters)
every few seconds while the page is visible, so a plan submitted elsewhere appears and a
running one moves without a reload.
"""

from __future__ import annotations

from urllib.parse import urlencode

from markupsafe import Markup

from orchestrator.api.ui.html import badge, count, join, moment, page
from orchestrator.api.ui.snapshot import Listing
from orchestrator.control.plan_query import PlanQuery
from storage.identity import Principal
from storage.listing import PlanSummary
from storage.status import PlanStatus

PAGE_SIZE = 50
SHORT_ID = 8
#: How often the list refreshes itself (milliseconds), read by ``static/list.js``.
REFRESH_MS = 4000


def listing_page(found: Listing, query: PlanQuery, *, viewer: Principal | None, auth: bool) -> str:
    status = query.statuses[0].value if query.statuses else ""
    label = query.labels[0] if query.labels else ""
    options = join(Markup('<option value="{v}"{sel}>{shown}</option>').format(
        v=s.value, sel=Markup(" selected") if s.value == status else "", shown=s.value.replace("_", " "))
        for s in PlanStatus)
    filters = Markup(
        '<form class="filters" method="get" action="/ui/" role="search">'
        '<label>Status <select name="status"><option value="">any</option>{options}</select></label>'
        '<label>Label <input name="label" value="{label}" placeholder="e.g. pricing" maxlength="64"></label>'
        '<button type="submit">Filter</button>{clear}</form>'
    ).format(options=options, label=label,
             clear=Markup('<a href="/ui/">Clear</a>') if (status or label) else "")
    body = Markup('<section class="listing" id="listing" data-query="{q}" data-refresh="{ms}">'
                  '<div class="listing-head"><h1>Plans</h1><span class="refreshed" id="refreshed"></span></div>'
                  '{filters}{table}</section>').format(
        q=_query_string(query, cursor=query.cursor), ms=REFRESH_MS, filters=filters,
        table=listing_table(found, query, viewer=viewer))
    return page("Plans", body, viewer=viewer, auth=auth, script="list.js")


def listing_table(found: Listing, query: PlanQuery, *, viewer: Principal | None) -> Markup:
    """The table and its page links: what the list's refresh replaces."""
    every_tenant = viewer is None or viewer.reach is None  # the operator or an admin: show whose plan it is
    filtered = bool(query.statuses or query.labels)
    if found.page.plans:
        head = Markup("<tr><th>Plan</th><th>Title</th><th>Status</th><th>Progress</th><th>Cost</th>{tenant}"
                      "<th>Labels</th><th>Created</th></tr>").format(
            tenant=Markup("<th>Tenant</th>") if every_tenant else "")
        rows = join(_row(p, found.tokens.get(p.id, 0), every_tenant) for p in found.page.plans)
        table = Markup('<table class="plans"><thead>{head}</thead><tbody>{rows}</tbody></table>').format(
            head=head, rows=rows)
    elif filtered:
        table = Markup('<p class="empty">No plans match these filters. <a href="/ui/">Show every plan</a></p>')
    else:
        table = Markup('<p class="empty">No plans {more}. Submit one with '
                       '<code>conclave submit examples/board.yaml --url …</code> and it appears here.</p>').format(
            more="on this page" if query.cursor else "yet")
    pages = Markup("")
    if query.cursor or found.page.next_cursor:
        links = [Markup('<a href="/ui/?{}">Newest</a>').format(_query_string(query, cursor=None))] \
            if query.cursor else []
        if found.page.next_cursor:
            links.append(Markup('<a rel="next" href="/ui/?{}">Older plans →</a>').format(
                _query_string(query, cursor=found.page.next_cursor)))
        pages = Markup('<nav class="pages">{}</nav>').format(join(links, " "))
    return Markup('<div id="plans-table">{table}{pages}</div>').format(table=table, pages=pages)


def _query_string(query: PlanQuery, *, cursor: str | None) -> str:
    pairs = [("status", s.value) for s in query.statuses] + [("label", x) for x in query.labels]
    if cursor:
        pairs.append(("cursor", cursor))
    return urlencode(pairs)


def _row(p: PlanSummary, tokens: int, every_tenant: bool) -> Markup:
    labels = join((Markup('<a class="label" href="/ui/?{q}" title="only plans labelled {x}">{x}</a>').format(
        q=urlencode([("label", x)]), x=x) for x in p.labels), " ")
    done, total = p.phases_done, p.phases_total
    return Markup(
        '<tr data-plan="{id}" data-status="{status_value}">'
        '<td class="id"><a href="/ui/plans/{id}" title="{id}"><code>{short}</code></a></td>'
        '<td class="title"><a href="/ui/plans/{id}">{title}</a>{task}</td><td>{status}</td>'
        '<td class="progress" data-done="{done}" data-total="{total}"><progress max="{max}" value="{done}">'
        '</progress> {done}/{total}</td>'
        '<td class="cost" data-tokens="{tokens}">{tokens_shown} tokens</td>'
        '{tenant}<td>{labels}</td><td>{created}</td></tr>'
    ).format(id=p.id, status_value=p.status.value, short=p.id[:SHORT_ID], title=p.title or p.id,
             task=Markup(' <code class="task" title="task id">{}</code>').format(p.task_id) if p.task_id else "",
             status=badge(p.status), done=done, total=total, max=max(total, 1),
             tokens=tokens, tokens_shown=count(tokens),
             tenant=Markup("<td>{}</td>").format(p.tenant) if every_tenant else "", labels=labels,
             created=moment(p.created_at.isoformat()))
