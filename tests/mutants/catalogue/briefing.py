"""Mutations of the briefing-pack invariants (I26-I32, and the briefing's part of I34):
atomic ingestion, no server-side paths, path safety, limits, Markdown chunking, UTF-16
offsets, flagged citations, the offline model citing only what its prompt carries, and
retrieval's one read per phase (none without a briefing)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

UNIT = "tests/unit/briefing"
CHUNKING = f"{UNIT}/test_chunking.py"
INGEST = f"{UNIT}/test_ingest.py"
READING = f"{UNIT}/test_reading.py"
RETRIEVAL = f"{UNIT}/test_retrieval.py"
UTF16 = f"{UNIT}/test_utf16.py"
ATOMIC = "tests/integration/test_briefing.py::test_a_failure_halfway_through_storing_chunks_stores_nothing"
OFFLINE = "tests/unit/llm/test_offline_citations.py"
STATEMENTS = "tests/unit/test_statements.py::test_a_briefing_costs_a_phase_one_read_and_no_briefing_none"


MUTATIONS: tuple[Mutation, ...] = (
    # I26 — the briefing is stored in the plan's transaction, or nothing is
    Mutation(
        "briefing-in-its-own-transaction", "I26", "storage/plans.py",
        (Edit("            n_chunks = add_briefing(s, plan_id, briefing)\n",
              "            n_chunks = sum(len(d.chunks) for d in briefing)\n"),
         Edit("            stored = outbox.records()\n    except Conflict:\n",
              "            stored = outbox.records()\n"
              "        with db.transaction() as s:\n"
              "            add_briefing(s, plan_id, briefing)\n"
              "    except Conflict:\n")),
        tests=(ATOMIC,),
        why="the plan commits before its briefing: a failure storing the chunks leaves a plan without them"),
    Mutation(
        "briefing-chunks-best-effort", "I26", "storage/briefings.py",
        (Edit("        if d.chunks:\n            s.execute(insert(Chunk), [\n",
              "        if d.chunks:\n"
              "          try:\n"
              "           with s.begin_nested():\n"
              "            s.execute(insert(Chunk), [\n"),
         Edit('                 "text": c.text, "tokens": c.tokens} for c in d.chunks])\n',
              '                 "text": c.text, "tokens": c.tokens} for c in d.chunks])\n'
              "          except Exception:\n"
              "            pass\n")),
        tests=(ATOMIC,),
        why="a document whose chunks fail to store is kept without them: the plan is visible with half a briefing"),

    # I27 — the server never reads a path a plan names
    Mutation(
        "server-reads-briefing-paths", "I27", "orchestrator/briefing/ingest.py",
        (Edit("        if d.path is not None:\n            _refuse(",
              "        if d.path is not None:\n"
              "            with open(d.path, encoding='utf-8') as f:\n"
              "                d = d.model_copy(update={'text': f.read(), 'title': d.path, 'id': d.id or f'doc{i}',"
              " 'path': None})\n"
              "        if d.path is not None:\n"
              "            _refuse("),),
        tests=(f"{INGEST}::test_a_plan_still_naming_a_path_is_refused_at_submit_and_nothing_is_read_or_stored",),
        why="a submission naming a path makes the server read that file from its own disk and store it"),

    # I28 — local reading stays inside the folder named
    mutation(
        "symlink-escape-followed", "I28", "orchestrator/client/local_briefing.py",
        "                if not real.is_relative_to(root):\n",
        "                if False:\n",
        tests=(f"{READING}::test_a_symlink_inside_the_folder_pointing_outside_is_skipped_and_reported",),
        why="a file in the briefing folder that links outside it is followed and its target sent with the plan"),
    mutation(
        "dot-dot-leaves-the-plans-folder", "I28", "orchestrator/client/local_briefing.py",
        "        if not target.is_relative_to(self.base):\n",
        "        if False:\n",
        tests=(f"{READING}::test_dot_dot_paths_may_not_leave_the_plans_folder",),
        why="a briefing path with '..' (or absolute) reads files outside the plan's folder"),
    mutation(
        "hidden-folders-entered", "I28", "orchestrator/client/local_briefing.py",
        '                if name.startswith("."):\n'
        '                    self._skip(here / name, "hidden folder: not read")',
        '                if False:\n'
        '                    self._skip(here / name, "hidden folder: not read")',
        tests=(f"{READING}::test_hidden_non_text_binary_and_oversized_files_are_skipped_and_reported",),
        why="hidden folders (.git, .ssh) inside the briefing folder are read"),

    # I29 — briefing limits are field errors
    mutation(
        "document-limit-off-by-one", "I29", "orchestrator/briefing/ingest.py",
        "    if len(entries) > limits.max_documents:\n",
        "    if len(entries) >= limits.max_documents:\n",
        tests=(f"{INGEST}::test_limits_are_field_errors",),
        why="a briefing of exactly CONCLAVE_BRIEFING_MAX_DOCUMENTS documents is refused"),
    mutation(
        "total-bytes-not-summed", "I29", "orchestrator/briefing/ingest.py",
        "        total_bytes += size\n",
        "        total_bytes = size\n",
        tests=(f"{INGEST}::test_limits_are_field_errors",),
        why="documents each under the per-document limit together exceed CONCLAVE_BRIEFING_MAX_BYTES unrefused"),
    mutation(
        "reading-byte-limit-ignored", "I29", "orchestrator/client/local_briefing.py",
        "        if self.total_bytes > self.limits.max_bytes:\n",
        "        if False:\n",
        tests=(f"{READING}::test_folder_limits_and_ids_name_the_field",),
        why="a folder whose files add up to more than CONCLAVE_BRIEFING_MAX_BYTES is read in full"),

    # I30 — fenced code is never a heading and never split; chunks keep their heading path
    mutation(
        "fence-ends-at-its-opening-line", "I30", "orchestrator/briefing/chunking.py",
        "            if close and close.group(1)[0] == char and len(close.group(1)) >= length:\n"
        "                return j\n",
        "            if close and close.group(1)[0] == char and len(close.group(1)) >= length:\n"
        "                return j\n"
        "            return i\n",
        tests=(f"{CHUNKING}::test_fenced_code_with_hash_lines_and_headings_inside_stays_one_chunk",
               f"{CHUNKING}::test_tilde_fences_and_info_strings"),
        why="a fence ends at its opening line: a '# comment' inside fenced code becomes a heading"),
    mutation(
        "fence-split-like-a-paragraph", "I30", "orchestrator/briefing/chunking.py",
        '        if b.kind == "para" and b.end - b.start > budget:\n',
        '        if b.kind != "heading" and b.end - b.start > budget:\n',
        tests=(f"{CHUNKING}::test_fenced_code_with_hash_lines_and_headings_inside_stays_one_chunk",),
        why="a fence longer than the chunk budget is split between chunks"),
    mutation(
        "sibling-headings-nest", "I30", "orchestrator/briefing/chunking.py",
        "            while stack and stack[-1][0] >= b.level:\n",
        "            while stack and stack[-1][0] > b.level:\n",
        tests=(f"{CHUNKING}::test_headings_give_chunks_with_their_heading_paths",),
        why="a heading keeps its preceding sibling in its path: chunks carry the wrong heading path"),

    # I31 — every offset handed out is in UTF-16 code units
    mutation(
        "chunk-offsets-in-code-points", "I31", "orchestrator/briefing/utf16.py",
        "        return index + bisect_left(self._astral, index)\n",
        "        return index\n",
        tests=(f"{UTF16}::test_chunk_offsets_slice_the_same_text_in_javascript",
               f"{INGEST}::test_submit_stores_documents_and_chunks_with_the_plan"),
        why="chunk and citation offsets count code points: a browser slices the wrong span after an emoji"),
    mutation(
        "document-length-in-code-points", "I31", "orchestrator/briefing/utf16.py",
        "    return len(text) + sum(1 for _ in _ASTRAL.finditer(text))\n",
        "    return len(text)\n",
        tests=(f"{UTF16}::test_utf16_helpers", f"{INGEST}::test_submit_stores_documents_and_chunks_with_the_plan"),
        why="a stored document's length counts code points, not UTF-16 units"),
    mutation(
        "citation-positions-in-code-points", "I31", "orchestrator/briefing/citations.py",
        "index.offset(m.start()),\n                                     index.offset(m.end())",
        "m.start(),\n                                     m.end()",
        tests=(f"{UTF16}::test_chunk_offsets_slice_the_same_text_in_javascript",),
        why="a citation's position in the citing text counts code points: it is misplaced after an emoji"),

    # I32 — a citation of a missing passage is flagged, never dropped; phase citations stay apart
    mutation(
        "unresolved-citation-dropped", "I32", "orchestrator/briefing/citations.py",
        "    return [Citation(r, known.get(r.key)) for r in refs]\n",
        "    return [Citation(r, known.get(r.key)) for r in refs if r.key in known]\n",
        tests=(f"{RETRIEVAL}::test_a_citation_to_a_missing_passage_is_flagged_never_dropped",
               "tests/integration/test_briefing.py::test_stored_chunks_are_citable_and_the_search_index_is_in_step"
               "[sqlite]"),
        why="a citation of a passage that does not exist disappears instead of being flagged unresolved"),
    mutation(
        "shared-bracket-citations-dropped", "I32", "orchestrator/briefing/citations.py",
        "        for m in _ONE_REF.finditer(text, group.start(1), group.end(1)):\n",
        "        for m in [_ONE_REF.search(text, group.start(1), group.end(1))]:\n",
        tests=(f"{RETRIEVAL}::test_citations_are_found_in_order_and_phase_citations_are_not_briefing_citations",),
        why="of several citations sharing brackets ([memo:1, risks:2]) only the first is returned"),
    Mutation(
        "bare-phase-citation-taken-for-briefing", "I32", "orchestrator/briefing/citations.py",
        (Edit('_REF = r"[A-Za-z0-9][A-Za-z0-9_-]{0,59}:[0-9]{1,6}"\n',
              '_REF = r"[A-Za-z0-9][A-Za-z0-9_-]{0,59}(?::[0-9]{1,6})?"\n'),
         Edit('_ONE_REF = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]{0,59}):([0-9]{1,6})")\n',
              '_ONE_REF = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]{0,59})(?::([0-9]{1,6}))?")\n'),
         Edit("int(m.group(2))", "int(m.group(2) or 0)")),
        tests=(f"{RETRIEVAL}::test_citations_are_found_in_order_and_phase_citations_are_not_briefing_citations",),
        why="a phase citation such as [synthesis] is read as a citation of a briefing document"),
    mutation(
        "offline-cites-passages-not-in-its-prompt", "I32", "orchestrator/gateway/providers/offline/writing.py",
        "        yield only_citing(piece, known)\n",
        "        yield piece\n",
        tests=(f"{OFFLINE}::test_a_call_given_no_passage_cites_none_even_when_it_quotes_citations",),
        why="the offline model repeats a colleague's citation of a passage it was never given"),

    # I34 (the briefing's part) — one read per briefed phase, none without a briefing
    mutation(
        "briefing-read-without-a-briefing", "I34", "tasks/briefer.py",
        "        if not plan.briefing or phase.kind not in BRIEFED_KINDS:\n",
        "        if phase.kind not in BRIEFED_KINDS:\n",
        tests=(STATEMENTS,),
        why="every phase of a plan without a briefing searches an empty pack: a statement per phase for nothing"),
    mutation(
        "briefing-read-per-tier", "I34", "orchestrator/briefing/passages.py",
        "        found = briefings.candidates(db, plan_id, query.tiers, cited, limit=CANDIDATES)\n",
        "        found = briefings.candidates(db, plan_id, query.tiers, cited, limit=CANDIDATES)\n"
        "        for tier in query.tiers:\n"
        "            briefings.search(db, plan_id, tier, limit=CANDIDATES)\n",
        tests=(STATEMENTS,),
        why="retrieval sends a search per tier on top of the one read: a briefed phase costs one read per tier"),
)
