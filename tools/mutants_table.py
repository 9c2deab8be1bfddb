"""The curated mutants ``tools/mutants.py`` runs (issue 51 item 6): one wrong change per row and
the tests that must notice it.

A row: ``name`` (unique, for ``--only``), ``file`` (from the repository's root), ``original``
(an exact snippet, found exactly once in the file: whitespace counts), ``mutated`` (what it
becomes), ``breaks`` (what the change breaks, citing the spec's rule where there is one) and
``tests`` (pytest node ids or files, run from the root; ``select`` is their ``-k``). Keep the
snippets short but unique, and the tests few and fast: each row runs only its own.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    original: str
    mutated: str
    breaks: str
    tests: tuple[str, ...]
    select: str = ""
    timeout: float = DEFAULT_TIMEOUT_SECONDS


MUTANTS: tuple[Mutant, ...] = (
    # -- the four issue 51 found alive ----------------------------------------------------------
    Mutant(
        "merge-409-as-write-failure",
        "workers/engine/merge.py",
        "        return KeysOwnedElsewhere(error.keys)\n",
        '        return WriteFailed(f"applying keys to Secret {name} failed: {error}")\n',
        "S11.4: a 409 field conflict of the apply becomes a plain write failure, not "
        "Conflict=True/KeyOwnedElsewhere naming the keys",
        ("tests/unit/test_apply.py",),
    ),
    Mutant(
        "gateway-409-field-conflict",
        "k8s/gateway.py",
        "        if owned:\n            return FieldsOwnedElsewhere(",
        "        if False:\n            return FieldsOwnedElsewhere(",
        "S11.4: the apiserver's 409 FieldManagerConflict is translated as a plain Conflict, "
        "so the keys another manager owns are lost",
        ("tests/unit/test_error_tree.py",),
    ),
    Mutant(
        "replace-size-precheck",
        "workers/engine/template_bounds.py",
        '    "replace": _replace_size,\n',
        "",
        "S11.2 containment: replace builds its result before its size is checked (40 MB in "
        "the test's case, in the operator's process)",
        ("tests/unit/test_template_bounds.py",),
        select="replace",
    ),
    Mutant(
        "remediation-missing-name",
        "workers/engine/remediation.py",
        '        return UNKNOWN.get(key, f"<{key}>")',
        '        return UNKNOWN.get(key, "")',
        "S5.1 remediation: a name the context lacks prints as nothing instead of <name>",
        ("tests/unit/test_remediation.py",),
    ),
    Mutant(
        "pause-scope-ignores-org",
        "workers/engine/pacing.py",
        '    return f"{instance_uid}/{org}"',
        '    return f"{instance_uid}"',
        "S4.1.6 rev 3: a 429 pauses every org of the instance, not the one that drew it",
        ("tests/unit/test_pause_end.py",),
    ),
    Mutant(
        "pause-note-ignores-org",
        "workers/engine/decide_after_fetch.py",
        '"pause", pause_scope(uid, spec.org), seconds=',
        '"pause", pause_scope(uid, ""), seconds=',
        "S4.1.6 rev 3: the pause a 429 records is not the (instance, org) that drew it",
        ("tests/unit/test_decide_after_fetch.py",),
    ),
    Mutant(
        "pause-read-ignores-org",
        "workers/engine/observe.py",
        "paused_for(self.store, instance_uid, spec.org, self.wall)",
        'paused_for(self.store, instance_uid, "", self.wall)',
        "S4.1.6 rev 4: a CR checks another org's 429 pause before minting its token",
        ("tests/unit/test_waiting_mints_no_token.py",),
    ),
    Mutant(
        "pause-gate-ignores-org",
        "workers/engine/fetch.py",
        "instance_gate(store, instance_uid, plan.spec.org, now.wall,",
        'instance_gate(store, instance_uid, "", now.wall,',
        "S4.1.6 rev 3: the fetch's gate reads another org's 429 pause",
        ("tests/unit/test_fetch_gate.py",),
    ),
    # -- one or more per engine decision module -------------------------------------------------
    Mutant(
        "decide-r7-latest-claims",
        "workers/engine/decide.py",
        "    winner = min(\n",
        "    winner = max(\n",
        "S4.2 R7: the latest CR naming a target wins it, not the earliest",
        ("tests/unit/test_decide_before_fetch.py",),
    ),
    Mutant(
        "decide-r8-adopts",
        "workers/engine/decide.py",
        "    if not target.controlled_by(spec.uid):\n",
        "    if False:\n",
        "S4.2 R8: a Secret this CR does not control is adopted",
        ("tests/unit/test_decide_before_fetch.py",),
    ),
    Mutant(
        "decide-after-fetch-404-unconfirmed",
        "workers/engine/decide_after_fetch.py",
        "        if fetch.cursor is not None or answered - seen[1] < wait:\n",
        "        if fetch.cursor is not None:\n",
        "S4.10.0: a second 404 scrubs before the confirmation spacing has passed",
        ("tests/unit/test_decide_after_fetch.py",),
    ),
    Mutant(
        "decide-scrub-merge-empties",
        "workers/engine/decide_scrub.py",
        "    kind = WriteKind.UNMERGE if spec.creation_policy == MERGE else WriteKind.EMPTY\n",
        "    kind = WriteKind.EMPTY\n",
        "S11.4, S4.10.1: a withdrawn Merge delivery empties the other tool's Secret instead of "
        "removing only this CR's keys",
        ("tests/unit/test_decide_s11.py",),
    ),
    Mutant(
        "decide-rollout-patch-failure-ignored",
        "workers/engine/decide_rollout.py",
        "        patch_failed = bool(failed)\n",
        "        patch_failed = False\n",
        "S4.9 step 2: a failed stamp patch keeps the cursor and no backoff, so it is never retried",
        ("tests/unit/test_decide_after_fetch.py", "tests/unit/test_decide_hygiene.py"),
    ),
    Mutant(
        "rollout-stall-without-hold",
        "workers/engine/rollout.py",
        "held_since is not None and now - held_since >= STALL_HOLD_SECONDS",
        "held_since is not None",
        "S6.5: a held test counts at once, not after two evaluations 5 min apart",
        ("tests/unit/test_rollout.py",),
    ),
    Mutant(
        "foreign-owner-one-resync",
        "workers/engine/foreign_owner.py",
        "    if age >= threshold:\n",
        "    if age >= resync_seconds:\n",
        "S4.1.7: another operator's Lease counts as stale after 1, not 3, resync intervals",
        ("tests/unit/test_foreign_owner.py",),
    ),
    Mutant(
        "expiry-warning-every-run",
        "workers/engine/expiry.py",
        '    return stored is None or stored.get("reason") != condition.reason\n',
        "    return True\n",
        "S4.13: the expiry Warning is emitted on every run, not when the condition appears or "
        "changes reason",
        ("tests/unit/test_decide_after_fetch.py",),
    ),
    Mutant(
        "refusals-terminating-namespace",
        "workers/engine/refusals.py",
        "    if forbidden.namespace_terminating:\n",
        "    if False:\n",
        "S4.15: a 403 from a terminating namespace is reported NamespaceNotBound instead of a "
        "quiet stop",
        ("tests/unit/test_decide_before_fetch.py",),
    ),
    Mutant(
        "binding-change-keeps-cursor",
        "workers/engine/binding.py",
        "    if binding != stored_binding:\n",
        "    if False:\n",
        "S4.3.1: a cursor is presented after its binding changed (another credential, org, "
        "mapping...)",
        ("tests/unit/test_planning.py",),
    ),
    Mutant(
        "status-facts-not-compared",
        "workers/engine/status.py",
        '"reason", "message", "facts", "observedGeneration")',
        '"reason", "message", "observedGeneration")',
        "S4.17: a condition whose facts changed is not written again",
        ("tests/unit/test_planning.py", "tests/unit/test_decide_hygiene.py"),
    ),
    Mutant(
        "force-sync-every-run",
        "workers/engine/force_sync.py",
        "    return None if handled == value else value\n",
        "    return value\n",
        "a force-sync value already handled forces a full fetch again on every run",
        ("tests/unit/test_decide_before_fetch.py",),
        select="force_sync",
    ),
    Mutant(
        "loader-control-unacknowledged",
        "workers/engine/loader_control.py",
        "        if unacknowledged:\n",
        "        if False:\n",
        "S4.6.2: a mapped loader-control key need not be acknowledged",
        ("tests/unit/test_decide_before_fetch.py",),
    ),
    Mutant(
        "merge-foreign-keys-unseen",
        "workers/engine/merge.py",
        "frozenset(data) & target.keys_managed_elsewhere(FIELD_MANAGER)",
        "frozenset()",
        "S11.4: keys another manager owns are not refused before the apply",
        ("tests/unit/test_decide_s11.py",),
    ),
    Mutant(
        "content-size-limit",
        "workers/engine/content.py",
        "    if total > MAX_TOTAL_BYTES:\n",
        "    if total > 2 * MAX_TOTAL_BYTES:\n",
        "S4.4.3: a Secret over 1 MiB of values is written",
        ("tests/unit/test_content.py",),
    ),
    Mutant(
        "native-basic-auth-needs-both",
        "workers/engine/native_types.py",
        "return [] if any(k in mapped for k in _BASIC_AUTH_KEYS)",
        "return [] if all(k in mapped for k in _BASIC_AUTH_KEYS)",
        "S4.7.2: a basic-auth Secret needs both username and password, not one of them",
        ("tests/unit/test_decide_before_fetch.py", "tests/unit/test_content.py"),
    ),
    Mutant(
        "credentials-designated-list-ignored",
        "workers/engine/credentials.py",
        "    if designated is not None and name not in designated.get(spec.namespace, ()):\n",
        "    if False:\n",
        "S2.3: a ServiceAccount missing from designatedServiceAccounts is used",
        ("tests/unit/test_decide_before_fetch.py",),
    ),
    Mutant(
        "shaping-skips-content-checks",
        "workers/engine/shaping.py",
        "    return shaped if isinstance(shaped, ContentRefusal) else checked(spec, shaped)\n",
        "    return shaped\n",
        "S11.2: a template's output skips the S4.7.3 content and S4.4.3 size checks",
        ("tests/unit/test_decide_s11.py",),
    ),
    Mutant(
        "policy-merge-written-whole",
        "workers/engine/policy_writes.py",
        '"Orphan": CONTROLLED, MERGE: MERGED}',
        '"Orphan": CONTROLLED, MERGE: CONTROLLED}',
        "S11.4: a Merge CR converges the other tool's Secret to its own keys (the others go)",
        ("tests/unit/test_decide_s11.py",),
    ),
    Mutant(
        "conditions-transition-every-write",
        "workers/engine/conditions.py",
        '    transitioned = previous is None or previous.get("status") != condition.status\n',
        "    transitioned = True\n",
        "S5.4: lastTransitionTime moves on every evaluation, not only when the status flips",
        ("tests/unit/test_planning.py",),
    ),
    Mutant(
        "secret-writes-unverified-data",
        "workers/engine/secret_writes.py",
        "            or current.data != data\n",
        "",
        "S4.8.4: a Secret that does not read back byte-identical counts as written",
        ("tests/unit/test_secret_verify.py",),
    ),
    Mutant(
        "stamp-ignores-key-names",
        "workers/engine/stamp.py",
        "        message += length_prefixed(name)\n",
        "",
        "S6.2: the stamp no longer covers the keys' names, so a renamed key restarts nothing",
        ("tests/unit/test_stamp.py",),
    ),
    Mutant(
        "stamp-root-reach-ignored",
        "workers/engine/stamp_root.py",
        "        found.append(f\"{metadata.get('namespace')}/{metadata.get('name')}\")\n",
        "        pass\n",
        "S6.3: a missing stamp root is recreated while CRs in reach hold stamps (every opted-in "
        "workload restarts)",
        ("tests/unit/test_stamp_root_reach.py", "tests/unit/test_decide_before_fetch.py"),
    ),
    Mutant(
        "dotenv-backslash-single-quoted",
        "workers/engine/file_formats.py",
        r"""    if not any(c in value for c in "'\\\r"):""",
        r"""    if not any(c in value for c in "'\r"):""",
        "S11.3: a dotenv value with a backslash is single-quoted, which a reader unescapes",
        ("tests/unit/test_file_formats.py",),
        select="byte_exact or refused",  # the pure vectors, not the external readers
    ),
    Mutant(
        "reports-heartbeat-unbounded",
        "workers/engine/reports.py",
        "    return min(max(resync_seconds, MIN_PERIOD), MAX_PERIOD)\n",
        "    return max(resync_seconds, MIN_PERIOD)\n",
        "S7.4: a CR resynced less than daily sends its heartbeat less than daily",
        ("tests/unit/test_report_pacing_reads.py", "tests/unit/test_capability_renewal.py"),
    ),
    # -- S11.2's guards --------------------------------------------------------------------------
    Mutant(
        "bound-operations-tenfold",
        "workers/engine/template_bounds.py",
        "        if self.operations > MAX_OPERATIONS:\n",
        "        if self.operations > 10 * MAX_OPERATIONS:\n",
        "S11.2: a render may loop and call 1,000,000 times, not 100,000",
        ("tests/unit/test_template_bounds.py",),
        select="loop",
    ),
    Mutant(
        "bound-recursive-loop-uncounted",
        "workers/engine/templates.py",
        "            args = (_loop(args[0]), *args[1:])\n",
        "            args = (args[0], *args[1:])\n",
        "S11.2 containment: a recursive loop(...)'s inner iterations are not counted",
        ("tests/unit/test_templates.py",),
        select="recursive-loop",
    ),
    Mutant(
        "bound-repetition-precheck",
        "workers/engine/templates.py",
        "max(size_of(left), 1) * max(right, 0) > MAX_STRING:",
        "max(size_of(left), 1) * max(right, 0) > 64 * MAX_STRING:",
        "S11.2 containment: a repetition up to 64 MiB is built before its size is checked",
        ("tests/unit/test_template_bounds.py",),
        select="repetition",
    ),
    Mutant(
        "bound-concat-precheck",
        "workers/engine/templates.py",
        "    if sum(len(t) for t in texts) > MAX_STRING:\n",
        "    if False:\n",
        "S11.2 containment: a concatenation (~) is built before its size is checked",
        ("tests/unit/test_template_bounds.py",),
        select="concatenation",
    ),
    Mutant(
        "bound-join-precheck",
        "workers/engine/template_bounds.py",
        '    "join": _join_size,\n',
        "",
        "S11.2 containment: join builds its result before its size is checked",
        ("tests/unit/test_template_bounds.py",),
        select="join",
    ),
    Mutant(
        "bound-call-depth",
        "workers/engine/templates.py",
        "            if current.depth > MAX_RECURSION:\n",
        "            if False:\n",
        "S11.2: macros may nest until Python's own recursion limit, not 64 deep",
        ("tests/unit/test_templates.py",),
        select="deep-recursion",
    ),
    Mutant(
        "bound-output-while-rendering",
        "workers/engine/template_bounds.py",
        "        if self.emitted > MAX_STRING:\n",
        "        if self.emitted > 64 * MAX_STRING:\n",
        "S11.2: one entry's output is not stopped at 1 MiB while it renders",
        ("tests/unit/test_template_bounds.py",),
        select="output",
    ),
    Mutant(
        "bound-output-in-all",
        "workers/engine/templates.py",
        "            if total > MAX_STRING:  # no Secret holds more",
        "            if False:  # no Secret holds more",
        "S11.2, S4.4.3: many entries of up to 1 MiB each are all carried to the operator",
        ("tests/unit/test_templates.py",),
        select="over_1_mib_in_all",
    ),
    Mutant(
        "bound-renders-an-object",
        "workers/engine/template_bounds.py",
        "    if not isinstance(value, _SCALARS):\n        raise BoundExceeded(RENDERS_AN_OBJECT)\n",
        "    if False:\n        raise BoundExceeded(RENDERS_AN_OBJECT)\n",
        "S11.2 rev 4 determinism: an object seen only at render emits its repr",
        ("tests/unit/test_templates.py",),
        select="object",
    ),
    Mutant(
        "bound-integer-bits",
        "workers/engine/templates.py",
        '                raise BoundExceeded(f"a number over {8 * MAX_STRING:,} bits")\n',
        "                pass\n",
        "S11.2 containment: a power or product of any size is computed",
        ("tests/unit/test_template_bounds.py",),
        select="number",
    ),
    Mutant(
        "bound-amplifying-str-methods",
        "workers/engine/templates.py",
        'getattr(method, "__name__", "") not in _STR_METHODS',
        'getattr(method, "__name__", "") in ()',
        "S11.2 containment: str methods that build (zfill, ljust, format...) are callable",
        ("tests/unit/test_template_bounds.py",),
        select="string_methods",
    ),
    Mutant(
        "bound-reserved-names",
        "workers/engine/templates.py",
        "        if reserved:\n",
        "        if False:\n",
        "S11.2: a template may call the rewriter's own guard functions",
        ("tests/unit/test_templates.py",),
        select="cannot_parse",
    ),
    Mutant(
        "reading-object-before-fetch",
        "workers/engine/template_reading.py",
        "            if isinstance(child, nodes.List | nodes.Dict | nodes.Tuple):\n",
        "            if False:\n",
        "S11.2 rev 4: a literal list, dict or tuple output is not refused before the fetch",
        ("tests/unit/test_templates.py",),
        select="before_the_fetch",
    ),
    Mutant(
        "reading-values-whole",
        "workers/engine/template_reading.py",
        "    return any(\n        _is_values(name)",
        "    return False and any(\n        _is_values(name)",
        "S11.2: an entry reading values whole is rendered without a missing source, instead of "
        "left out and named",
        ("tests/unit/test_templates.py",),
        select="missing",
    ),
    Mutant(
        "child-no-cpu-limit",
        "workers/render_child.py",
        "            _limit_cpu(cpu_seconds)\n",
        "            pass\n",
        "S11.2 containment: a render runs without RLIMIT_CPU (2 s of CPU)",
        ("tests/unit/test_render_pool.py",),
        select="cpu_limit",
    ),
    Mutant(
        "child-no-memory-limit",
        "workers/render_child.py",
        "    resource.setrlimit(resource.RLIMIT_AS, (address_space, hard))\n",
        "    pass\n",
        "S11.2 containment: a render runs without RLIMIT_AS (64 MiB above its baseline)",
        ("tests/unit/test_render_pool.py",),
        select="first_choice",
    ),
    Mutant(
        "pool-no-wall-kill",
        "workers/render_pool.py",
        "            if remaining <= 0:\n",
        "            if remaining <= 0 and False:\n",
        "S11.2 containment: a render without an answer is waited for past the 5 s wall budget",
        ("tests/unit/test_render_pool.py",),
        select="wall_budget",
    ),
    Mutant(
        "pool-child-inherits-environment",
        "workers/render_pool.py",
        'env={"PYTHONPATH": str(root),',
        'env={**os.environ, "PYTHONPATH": str(root),',
        "S11.2 containment: the renderer child holds the operator's environment (tokens, "
        "database URLs)",
        ("tests/unit/test_render_pool.py",),
        select="environment",
    ),
)
