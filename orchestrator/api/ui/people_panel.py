"""The plan page's people panel (``#people``): where a person acts on a plan.

It shows who the plan waits for and since when — each seat asked, with what it is asked, the
phases to read first and its deadline — the approval of its draft, the notes that steer it,
and, for a viewer who may write (``plans:write``, or authentication off), the forms: answer a
seat, approve, send back with a note, steer, cancel, resume. Every form posts to ``/ui``
(:mod:`orchestrator.api.ui.actions`) with the session's form token in a hidden field; the
session cookie alone authorizes nothing.

The page script refreshes the panel (``GET /ui/plans/{id}/people``) when a person's event is
stored, keeping what the person was typing.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote

from markupsafe import Markup

from orchestrator.api.ui.html import join, moment
from orchestrator.api.ui.snapshot import PlanSnapshot
from orchestrator.plan.human import MAX_ANSWER_CHARS, MAX_NOTE_CHARS, MAX_NOTES
from orchestrator.plan.views import PhaseView, PlanView
from storage.status import PhaseStatus, PlanStatus

#: What a form post that worked says on the page it returns to (``?done=``).
DONE = {"answered": "Your answer is stored: the meeting goes on.",
        "approved": "Approved: the draft is the plan's answer.",
        "sent-back": "Sent back: the draft is being rewritten with your note.",
        "steered": "Your note is stored: every phase that starts from now on is given it.",
        "cancelled": "Cancel requested.",
        "resumed": "Resumed."}


def _who(actor: dict[str, object] | None) -> str:
    return str((actor or {}).get("name") or "the operator")


def _hidden(csrf: str) -> Markup:
    return Markup('<input type="hidden" name="csrf" value="{}">').format(csrf)


def _action(view: PlanView, what: str) -> str:
    return f"/ui/plans/{quote(view.id, safe='')}/{what}"


def awaits_a_person(view: PlanView) -> bool:
    """The plan waits for a person now (a seat's answer, an approval): the panel comes first."""
    return bool(view.awaiting) or view.status == PlanStatus.AWAITING_APPROVAL


def people_section(snap: PlanSnapshot, *, can_act: bool, csrf: str) -> Markup:
    """The panel, as the database has it now (rendered whole: the script swaps it); nothing
    for a plan with no people, no approval and no notes that nobody may act on any more."""
    view = snap.view
    involved = any(p.human for p in view.phases) or view.approval is not None or bool(view.notes)
    if not involved and (view.final or not can_act):
        return Markup("")
    parts = [_seat(view, p, can_act=can_act, csrf=csrf) for p in view.phases
             if p.status == PhaseStatus.AWAITING_INPUT]
    if view.approval is not None:
        parts.append(_approval(snap, can_act=can_act, csrf=csrf))
    if view.notes or (can_act and view.status == PlanStatus.RUNNING and not view.cancel_requested):
        parts.append(_steering(view, can_act=can_act, csrf=csrf))
    if can_act:
        parts.append(_controls(view, csrf))
    waiting = sum(1 for p in view.phases if p.status == PhaseStatus.AWAITING_INPUT)
    head = Markup('<h2>People</h2><p class="awaiting">{}</p>').format(_awaiting_line(view))
    return Markup('<section id="people" class="people" data-waiting="{w}" data-approval="{a}" data-status="{s}">'
                  '{head}{parts}</section>').format(
        w=waiting, a=(view.approval or {}).get("state", ""), s=view.status, head=head, parts=join(parts))


def _awaiting_line(view: PlanView) -> Markup:
    if view.awaiting:
        who = join((Markup('<b>{e}</b> (<a href="#seat-{k}">{k}</a>) since {since}').format(
            e=w["expert"], k=w["phase"], since=moment(w["since"])) for w in view.awaiting), "; ")
        return Markup("Waiting for {}.").format(who)
    if view.status == PlanStatus.AWAITING_APPROVAL:
        return Markup("Waiting for a person to approve the draft.")
    if not view.final:
        return Markup("Nobody is awaited: the experts are at work.")
    return Markup("The plan has ended.")


def _seat(view: PlanView, seat: PhaseView, *, can_act: bool, csrf: str) -> Markup:
    upstream = set(_inputs_of(seat, view))
    inputs = [p.key for p in view.phases if p.key in upstream and p.status == PhaseStatus.COMPLETED
              and p.kind != "divergence"]
    read_first = join((Markup('<a href="#phase-{k}">{k}</a>').format(k=k) for k in inputs), ", ")
    form = Markup("")
    if can_act:
        form = Markup(
            '<form method="post" action="{action}" class="answer-form">{csrf}'
            '<input type="hidden" name="idempotency_key" value="{idem}">'
            '<label for="answer-{key}">Your answer, as {expert}</label>'
            '<textarea id="answer-{key}" name="text" rows="8" maxlength="{max}" required '
            'data-keep="answer-{key}"></textarea>'
            '<button type="submit">Send your answer</button></form>'
        ).format(action=_action(view, f"phases/{quote(seat.key, safe='')}/input"), csrf=_hidden(csrf),
                 idem=secrets.token_hex(16), key=seat.key, expert=seat.expert or "", max=MAX_ANSWER_CHARS)
    return Markup(
        '<article class="seat" id="seat-{key}" data-key="{key}">'
        '<header><span class="who">{expert}</span> · <a href="#phase-{key}">{key}</a>'
        '<span class="badge status-awaiting_input">awaiting input</span></header>'
        '<p class="when">asked {since} · answer by {due} (then the plan goes on without it)</p>'
        '<div class="asked">{asked}</div>'
        '<p class="read">Read first: {read}</p>{form}</article>'
    ).format(key=seat.key, expert=seat.expert or seat.key, since=moment(seat.asked_at), due=moment(seat.due_at),
             asked=seat.asked or "Your turn.", read=read_first or Markup("nothing"), form=form)


def _inputs_of(seat: PhaseView, view: PlanView) -> list[str]:
    """A seat's inputs as the page knows them: its dependencies and theirs, transitively."""
    deps = {p.key: p.depends_on for p in view.phases}
    found: list[str] = []
    stack = list(seat.depends_on)
    while stack:
        key = stack.pop()
        if key not in found and key in deps:
            found.append(key)
            stack.extend(deps[key])
    return found


def _approval(snap: PlanSnapshot, *, can_act: bool, csrf: str) -> Markup:
    view = snap.view
    a = view.approval or {}
    sent = a.get("sent_back")
    history = Markup("")
    if sent:
        history = Markup('<p class="sent-back">Sent back once by <b>{who}</b>: “{note}” — <a href="#phase-{k}">{k}</a> '
                         'is the revision.</p>').format(who=_who(sent.get("by")), note=sent.get("note") or "",
                                                        k=(a.get("revision_failed") or {}).get("phase")
                                                        or a.get("phase"))
    failed = a.get("revision_failed")
    if failed:
        history += Markup('<p class="revision-failed">The revision ({rk}) failed — {error} — so the first draft, '
                          '<a href="#phase-{k}">{k}</a>, is the answer again.</p>').format(
            rk=failed.get("phase"), error=failed.get("error") or failed.get("error_code") or "", k=a.get("phase"))
    state = a.get("state")
    if state == "awaiting":
        what = "The revision" if a.get("revision") else "The draft"
        line = Markup('{what} (<a href="#phase-{k}">{k}</a>, shown above as the answer) waits for approval since '
                      '{since}: it goes out only once approved.').format(what=what, k=a.get("phase"),
                                                                         since=moment(a.get("since")))
    elif state == "approved":
        line = Markup("Approved by <b>{who}</b>: <a href=\"#phase-{k}\">{k}</a> is the plan's answer.").format(
            who=_who(snap.approved_by), k=a.get("phase"))
    elif state == "drafting":
        line = Markup("The answer will wait for approval once it is written.")
    else:
        line = Markup("The plan ended {} before its draft was approved.").format(str(view.status).replace("_", " "))
    forms = Markup("")
    if can_act and state == "awaiting":
        send_back = Markup("") if sent else Markup(
            '<form method="post" action="{action}" class="send-back-form">{csrf}'
            '<label for="send-back-note">Or send it back once, with a note for its writer</label>'
            '<textarea id="send-back-note" name="note" rows="3" maxlength="{max}" required data-keep="send-back">'
            '</textarea><button type="submit">Send back</button></form>'
        ).format(action=_action(view, "send-back"), csrf=_hidden(csrf), max=MAX_NOTE_CHARS)
        forms = Markup('<form method="post" action="{action}" class="approve-form">{csrf}'
                       '<button type="submit" class="primary">Approve</button></form>{send_back}').format(
            action=_action(view, "approve"), csrf=_hidden(csrf), send_back=send_back)
    return Markup('<article class="approval" id="approval" data-state="{state}"><h3>Approval</h3>'
                  '<p>{line}</p>{history}{forms}</article>').format(state=state, line=line, history=history,
                                                                    forms=forms)


def _steering(view: PlanView, *, can_act: bool, csrf: str) -> Markup:
    notes = join(Markup('<li><b>{who}</b>: {note} <span class="at">{at}</span></li>').format(
        who=_who(n.get("by")), note=n.get("note"), at=moment(n.get("at"))) for n in view.notes)
    listed = Markup('<ol class="notes">{}</ol>').format(notes) if view.notes else Markup("")
    form = Markup("")
    if can_act and view.status == PlanStatus.RUNNING and not view.cancel_requested and len(view.notes) < MAX_NOTES:
        form = Markup('<form method="post" action="{action}" class="steer-form">{csrf}'
                      '<label for="steer-note">A note for the phases still to start (the experts are told who '
                      'sent it)</label>'
                      '<textarea id="steer-note" name="note" rows="2" maxlength="{max}" required data-keep="steer">'
                      '</textarea><button type="submit">Send a note</button></form>').format(
            action=_action(view, "steer"), csrf=_hidden(csrf), max=MAX_NOTE_CHARS)
    return Markup('<article class="steering" id="steering"><h3>Steering</h3>{listed}{form}</article>').format(
        listed=listed, form=form)


def _controls(view: PlanView, csrf: str) -> Markup:
    buttons = []
    if not view.final and not view.cancel_requested:
        buttons.append(Markup('<form method="post" action="{action}" class="cancel-form">{csrf}'
                              '<button type="submit" class="danger">Cancel the plan</button></form>').format(
            action=_action(view, "cancel"), csrf=_hidden(csrf)))
    resumable = (PlanStatus.RUNNING, PlanStatus.FAILED, PlanStatus.BUDGET_EXHAUSTED)
    if view.status in resumable and not view.cancel_requested:
        buttons.append(Markup('<form method="post" action="{action}" class="resume-form">{csrf}'
                              '<button type="submit">Resume</button></form>').format(
            action=_action(view, "resume"), csrf=_hidden(csrf)))
    return Markup('<div class="controls">{}</div>').format(join(buttons)) if buttons else Markup("")
