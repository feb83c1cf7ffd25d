"""One level-based reconcile of a SpeculativeDeployment: desired children from render/, applied and
pruned; status from what the children report. Synchronous: the async side runs it in a thread."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from specpilot import render
from specpilot.api import author_policy, drain
from specpilot.api.models import SpeculativeDeployment
from specpilot.api.validate import DEFAULT_POLICY, InvalidSpeculativeDeployment, Policy, load
from specpilot.canary.tracks import TrackPlan, plan_from, plan_tracks
from specpilot.controller import applied as ap
from specpilot.controller import metric_names as m
from specpilot.controller import model_cache as mc
from specpilot.controller import status as st
from specpilot.controller.bodies import Bodies
from specpilot.controller.child_cache import ChildCache, controller_of
from specpilot.controller.events import EventRecorder
from specpilot.controller.kube import CHILD_REQUESTS, RECONCILE_WORKERS, Kube, KubeError, object_path, sd_path
from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.status_write import write_changed
from specpilot.display import bounded
from specpilot.api.names import DEPLOYMENT_LABEL, MANAGED_BY, MANAGER, N_LABEL, TRACK_LABEL

log = logging.getLogger(__name__)

PAUSED_ANNOTATION = "specpilot.io/paused"
CHILD_CONFLICT, CHILDREN_APPLIED = "ChildConflict", "ChildrenApplied"
# Kinds the controller owns, as (apiVersion, kind, plural); listed to find children to prune.
CHILD_KINDS = (("v1", "ConfigMap", "configmaps"), ("apps/v1", "Deployment", "deployments"),
               ("v1", "Service", "services"))
CHILD_KIND_NAMES = tuple(kind for _, kind, _ in CHILD_KINDS)
T = TypeVar("T")
R = TypeVar("R")


def _lists(rows: tuple[tuple[int, ...], ...] | None) -> list[list[int]] | None:
    return [list(row) for row in rows] if rows else None


def _owner_text(obj: dict[str, Any]) -> str:
    """Whose `obj` is, for a conflict's message: its controller (or first) owner, else the managers that
    wrote it (metadata.managedFields)."""
    meta = obj.get("metadata") or {}
    refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
    ref = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if ref is not None:
        return bounded(f"is owned by {ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})", 300)
    managers = sorted({str(f.get("manager")) for f in meta.get("managedFields") or []
                       if isinstance(f, dict) and f.get("manager")})
    who = f", written by {', '.join(managers[:4])}" if managers else ""
    return bounded(f"is not owned by this SpeculativeDeployment{who}", 300)


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """What the operator sets on a child. Other controllers change status and annotations (revision
    numbers) all the time; that is no reason to report a child as changed."""
    meta = obj["metadata"]
    return {"labels": meta.get("labels"), "owners": meta.get("ownerReferences"),
            **{k: v for k, v in obj.items() if k not in ("metadata", "status")}}


class Reconciler:
    def __init__(self, kube: Kube, metrics: OperatorMetrics, events: EventRecorder,
                 policy: Policy = DEFAULT_POLICY, serving: render.ServingDefaults = render.DEFAULT_SERVING) -> None:
        self.kube, self.metrics, self.events, self.policy = kube, metrics, events, policy
        self.cache = ChildCache()  # fed by the child watches (handlers.py) and by what reconciles apply
        self.bodies = Bodies()  # the objects themselves: their watch (handlers.py) and our status writes' answers
        self.uids: dict[tuple[str, str], str] = {}  # each object's uid, by (namespace, name), as last reconciled
        self.serving = serving  # cluster-wide serving image, pull secrets and runtime image
        # The track plan each object's children were last rendered for: a status.tuning write that
        # changes it needs a reconcile, although Kopf does not report status-only changes as updates.
        self.rendered: dict[tuple[str, str], TrackPlan] = {}
        # Likewise the drain each object's children were last rendered with (status.drain, written by the drain
        # measurement, is rendered into the `<name>-drain` ConfigMap).
        self.rendered_drain: dict[tuple[str, str], int] = {}
        self.rendered_uids: set[tuple[str, str]] = set()  # (namespace, uid) reconciled since this operator started
        # Children per object by kind, and their sum (kept up to date, not summed per reconcile: that
        # was linear in the objects), for the managed-objects gauge.
        self.children: dict[tuple[str, str], Counter[str]] = {}
        self._total: Counter[str] = Counter()
        self._counting = threading.Lock()  # reconciles of different objects run in parallel threads
        # Per object: the digest of the body last applied to each child, by (kind, name) (applied.py).
        self.applied: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
        self._requests = ThreadPoolExecutor(RECONCILE_WORKERS * CHILD_REQUESTS, "child-request")

    def _at_once(self, call: Callable[[T], R], items: Sequence[T]) -> list[R | KubeError]:
        """`call` of each item, the requests in flight together; each answer, or the KubeError it raised, in
        the items' order (any other exception is raised once all are done)."""
        def attempt(item: T) -> R | KubeError:
            try:
                return call(item)
            except KubeError as exc:
                return exc
        if len(items) <= 1:
            return [attempt(item) for item in items]
        return list(self._requests.map(attempt, items))

    def forget(self, namespace: str, name: str) -> None:
        self.bodies.drop(namespace, name)
        self.rendered.pop((namespace, name), None)
        self.rendered_drain.pop((namespace, name), None)
        self.applied.pop((namespace, name), None)
        uid = self.uids.pop((namespace, name), None)
        if uid is not None:
            self.cache.forget((namespace, uid))
            self.rendered_uids.discard((namespace, uid))
        self._count_children((namespace, name), Counter())

    def _count_children(self, key: tuple[str, str], counts: Counter[str]) -> None:
        with self._counting:
            self._total.subtract(self.children.pop(key, Counter()))
            self._total.update(counts)
            if counts:
                self.children[key] = counts
            for kind in CHILD_KIND_NAMES:
                self.metrics.managed.labels(kind).set(self._total[kind])

    def born(self, namespace: str, name: str, uid: str) -> None:
        """The object was created while the operator watched: it has no children yet."""
        self.uids[(namespace, name)] = uid
        self.cache.born((namespace, uid), name, CHILD_KIND_NAMES)

    def deployments(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """The object's Deployments (stable, canary) as they are now, from the child cache where it knows."""
        return [child for (kind, _), child in self._children(obj, live=False, kinds=("Deployment",)).items()]

    def needs_render(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        enabled = bool(((obj.get("spec") or {}).get("tuning") or {}).get("enabled"))
        status = obj.get("status") or {}
        return key in self.rendered and (self.rendered[key] != plan_from(enabled, status)
                                         or self.rendered_drain.get(key) != _drain_of(obj).seconds)

    def reconcile(self, namespace: str, name: str) -> str | None:
        """Reconcile the object as it is now; returns the metric result, None when it is gone."""
        obj = self.bodies.take(namespace, name)
        if obj is None:
            obj = self.kube.get(sd_path(namespace, name))
            if obj is not None:
                self.bodies.offer(obj)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return None
        started = time.monotonic()
        try:
            result = self._reconcile(obj)
        except Exception as exc:
            self.bodies.drop(namespace, name)  # the retry reads afresh (a 409 said this body was older than the API's)
            self.metrics.reconciles.labels(namespace, name, m.RESULT_ERROR).inc()
            self.metrics.errors.labels(namespace, name, type(exc).__name__).inc()
            raise
        finally:
            self.metrics.duration.observe(time.monotonic() - started)
        self.metrics.reconciles.labels(namespace, name, result).inc()
        if result not in (m.RESULT_UNCHANGED, m.RESULT_APPLIED, m.RESULT_INVALID):  # those say what changed
            log.info("reconciled %s/%s: %s", namespace, name, result)
        return result

    def _reconcile(self, obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        ns, name, generation = meta["namespace"], meta["name"], meta.get("generation", 1)
        old_status = obj.get("status") or {}
        if (meta.get("annotations") or {}).get(PAUSED_ANNOTATION) == "true":
            self._write_status(obj, old_status, st.paused_status(old_status, generation))
            return m.RESULT_PAUSED
        try:
            sd = load(obj, self.policy)
            self._check_secret(sd, ns)
        except InvalidSpeculativeDeployment as exc:
            message = "; ".join(str(p) for p in exc.problems)
            if not st.condition_says(old_status, st.SPEC_VALID, "False", message):
                self.events.warning(obj, "InvalidSpec", message)
                log.warning("reconciled %s/%s: invalid spec, nothing applied: %s", ns, name,
                            bounded(message, st.MAX_MESSAGE))
            self._write_status(obj, old_status, st.invalid_status(old_status, generation, message))
            self.metrics.invalid.labels(ns, name).set(1)
            return m.RESULT_INVALID
        self.metrics.invalid.labels(ns, name).set(0)
        plan = plan_tracks(sd, old_status)
        drain_now = drain.in_force(sd.spec.engine.drain_seconds, old_status.get("drain"))
        try:
            desired = render.render(sd, plan.stable_n, plan.canary_pods_n, owner=render.owner_reference(obj),
                                    stable_schedule=_lists(plan.stable_schedule),
                                    canary_schedule=None if plan.canary_live else _lists(plan.canary_schedule),
                                    defaults=self.serving, stable_contender=plan.stable_contender,
                                    canary_contender=plan.canary_contender, live=plan.live,
                                    drain_s=drain_now.seconds, stable_static=plan.stable_static,
                                    canary_static=plan.canary_static)
        except ValueError as exc:
            # status.tuning asked for an N the method cannot run: a tuning-loop bug, not the user's. Leave
            # what runs alone and say so; retrying would not help until the loop writes another plan.
            self.events.warning(obj, "InvalidTrackPlan", f"not applied: {exc}")
            log.error("%s/%s: track plan %s not applied: %s", ns, name, plan, exc)
            return m.RESULT_ERROR
        # Same generation and same plan, yet a child differs: someone edited it by hand.
        reverting = generation == old_status.get("observedGeneration") and \
            self.rendered.get((ns, name), plan) == plan and \
            self.rendered_drain.get((ns, name), drain_now.seconds) == drain_now.seconds
        uid = meta["uid"]
        self.uids[(ns, name)] = uid
        # The first reconcile after the operator starts reads live children (Kopf's initial listing of
        # them may still be on its way into the cache), unless the object is newer than the watch.
        existing = self._children(obj, live=(ns, uid) not in self.rendered_uids and not self.cache.is_born((ns, uid)))
        conflicts = self._claim(obj, desired, existing)
        if conflicts:
            return self._blocked(obj, sd, plan, old_status, existing, conflicts)
        # What was last rendered in full, put back if an apply fails: the retry then announces what it does
        # ("created", "updated"), not a revert of someone else's change.
        last_rendered = self.rendered.get((ns, name)), self.rendered_drain.get((ns, name))
        self.rendered[(ns, name)] = plan
        self.rendered_drain[(ns, name)] = drain_now.seconds
        self.rendered_uids.add((ns, uid))
        first = "numSpeculativeTokens" not in old_status  # never reconciled to a running state before
        changes: list[str] = []  # what was created, updated, reverted or deleted, for the log
        refused: list[str] = []  # children the API server refused (4xx), with its words
        # One Event per kind of change, naming every child it touched: a new object's three children are one
        # "Created" (three Events each would be the API server's busiest write at a thousand new objects).
        announced: dict[str, list[str]] = {}
        live: dict[tuple[str, str], dict[str, Any]] = {}
        applied = self.applied.setdefault((ns, name), {})
        keys = [(child["kind"], child["metadata"]["name"]) for child in desired]
        befores = [existing.pop(key, None) for key in keys]
        bodies = [ap.digest(child) for child in desired]
        stale = [i for i, (child, before) in enumerate(zip(desired, befores)) if before is None
                 or applied.get(keys[i]) != bodies[i] or not ap.holds(before, child)]
        # What the pods mount (ConfigMaps) and the Service go first, the Deployments once those are in: a pod made
        # before its ConfigMap waits for the kubelet's next mount attempt (FailedMount, back-off up to minutes).
        answers: dict[int, Any] = {}
        for batch in ([i for i in stale if desired[i]["kind"] != "Deployment"],
                      [i for i in stale if desired[i]["kind"] == "Deployment"]):
            if any(isinstance(a, KubeError) and a.transient for a in answers.values()):
                break  # retried whole: a Deployment waits for the ConfigMap it mounts
            answers.update(zip(batch, self._at_once(
                lambda i: self.kube.apply(desired[i], force=befores[i] is not None), batch)))
        for i, result in answers.items():  # every apply that went through is known, even if another is retried
            applied.pop(keys[i], None)
            if not isinstance(result, KubeError):
                self.cache.applied((ns, uid), result)
                applied[keys[i]] = bodies[i]
        if any(isinstance(a, KubeError) for a in answers.values()):
            self._unrender((ns, name), *last_rendered)
        transient = next((a for a in answers.values() if isinstance(a, KubeError) and a.transient), None)
        if transient is not None:
            raise transient
        for i, (child, key, before) in enumerate(zip(desired, keys, befores)):
            answer: dict[str, Any] | KubeError | None = answers[i] if i in answers else before
            if answer is None or isinstance(answer, KubeError):  # None: never, an unchanged child has a before
                refused.append(f"{key[0]} {key[1]}: {answer}")
                if before is not None:
                    live[key] = before
                continue
            after = live[key] = answer
            if before is None or _content(before) != _content(after):
                reason, message = _announcement(obj, child, before, first, reverting)
                announced.setdefault(reason, []).append(message)
                changes.append(message)
        for (kind, child_name), child in existing.items():
            self.kube.delete(child)
            self.cache.deleted((ns, uid), child)
            applied.pop((kind, child_name), None)
            changes.append(f"deleted {kind} {child_name}: no longer rendered")
            self.events.normal(obj, "Deleted", changes[-1])
        for reason, messages in announced.items():
            self.events.normal(obj, reason, "; ".join(messages))
        if changes:
            log.info("reconciled %s/%s: %s", ns, name, "; ".join(changes))
        self._count_children((ns, name), Counter(kind for kind, _ in live))
        deployments = {c["metadata"]["labels"].get(TRACK_LABEL): c for c in live.values() if c["kind"] == "Deployment"}
        rollout = st.rollout_of(deployments.get("stable"), deployments.get("canary"), N_LABEL)
        new_status = st.running_status(old_status, generation,
                                       sd.for_contender(plan.stable_contender).spec.speculative.method,
                                       st.served(rollout, plan), sd.spec.tuning.enabled)
        new_status.update(st.live_status(rollout, plan))
        if not drain_now.said_by(old_status.get("drain")):
            new_status["drain"] = drain_now.to_status()
        new_status["conditions"] = self._model_cache(obj, sd, old_status, new_status["conditions"], generation)
        new_status["conditions"] = self._ownership_conditions(obj, old_status, new_status["conditions"], generation,
                                                              conflicts=[], refused=refused)
        self._write_status(obj, old_status, new_status)
        self.metrics.ready.labels(ns, name).set(rollout.ready)
        for track, n in (("stable", rollout.stable_n), ("canary", rollout.canary_n)):
            if n is not None:
                self.metrics.n.labels(ns, name, track).set(n)
            else:
                try:
                    self.metrics.n.remove(ns, name, track)
                except KeyError:
                    pass
        if refused:
            return m.RESULT_REFUSED
        return m.RESULT_APPLIED if changes else m.RESULT_UNCHANGED

    def _unrender(self, key: tuple[str, str], plan: TrackPlan | None, drain_s: int | None) -> None:
        if plan is None:
            self.rendered.pop(key, None)
        else:
            self.rendered[key] = plan
        if drain_s is None:
            self.rendered_drain.pop(key, None)
        else:
            self.rendered_drain[key] = drain_s

    def _check_secret(self, sd: SpeculativeDeployment, namespace: str) -> None:
        """The Secret spec.engine.hfTokenSecretRef names must have opted in (author_policy.py): the pod hands
        it to whatever hub the engine talks to. Raises InvalidSpeculativeDeployment when it has not."""
        ref = sd.spec.engine.hf_token_secret_ref
        if ref is None or self.policy.author.secret_refs == "any":
            return
        try:
            labels = self.kube.labels_of(f"/api/v1/namespaces/{namespace}/secrets/{ref.name}")
        except KubeError as exc:
            if exc.status != 403:
                raise
            labels = None
        problem = author_policy.secret_problem(ref.name, labels, self.policy.author)
        if problem is not None:
            raise InvalidSpeculativeDeployment([problem])

    def _claim(self, obj: dict[str, Any], desired: list[dict[str, Any]],
               existing: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, str, str]]:
        """Read every desired child not known as this object's own: one of this object's (its label edited
        away, or not in the cache yet) joins `existing`; any other object holding the name is a conflict,
        described as (kind, name, message). Nothing is written to an object the operator did not create."""
        uid, conflicts = obj["metadata"]["uid"], list[tuple[str, str, str]]()
        unknown = [child for child in desired if (child["kind"], child["metadata"]["name"]) not in existing]
        # From kube-apiserver's watch cache: the apply that follows does not force, so an object created in
        # the moment since is a 409 there, not a takeover.
        for child, found in zip(unknown, self._at_once(lambda c: self.kube.get(object_path(c), cached=True), unknown)):
            if isinstance(found, KubeError):
                raise found
            if found is None:
                continue
            key = (child["kind"], child["metadata"]["name"])
            found.setdefault("apiVersion", child["apiVersion"])
            found.setdefault("kind", child["kind"])
            owner = controller_of(found)
            if owner is not None and owner[1] == uid:
                existing[key] = found
                continue
            conflicts.append((*key, f"{key[0]} {key[1]} already exists and {_owner_text(found)}"))
        return conflicts

    def _blocked(self, obj: dict[str, Any], sd: SpeculativeDeployment, plan: TrackPlan, old_status: dict[str, Any],
                 existing: dict[tuple[str, str], dict[str, Any]], conflicts: list[tuple[str, str, str]]) -> str:
        """A child's name is taken: nothing is created, applied or deleted; status and a Warning say which
        object and whose it is. A later reconcile (the taken object's deletion, or the resync) recovers."""
        meta = obj["metadata"]
        ns, name, generation = meta["namespace"], meta["name"], meta.get("generation", 1)
        for kind, child_name, _ in conflicts:
            self.cache.blocked((ns, kind, child_name), (ns, name))
        said = [message for _, _, message in conflicts]
        deployments = {c["metadata"]["labels"].get(TRACK_LABEL): c for c in existing.values()
                       if c["kind"] == "Deployment" and isinstance(c["metadata"].get("labels"), dict)}
        rollout = st.rollout_of(deployments.get("stable"), deployments.get("canary"), N_LABEL)
        new_status = st.running_status(old_status, generation,
                                       sd.for_contender(plan.stable_contender).spec.speculative.method, rollout,
                                       sd.spec.tuning.enabled)
        new_status["conditions"] = self._ownership_conditions(obj, old_status, new_status["conditions"], generation,
                                                              conflicts=said, refused=[])
        self._write_status(obj, old_status, new_status)
        return m.RESULT_CONFLICT

    def _ownership_conditions(self, obj: dict[str, Any], old_status: dict[str, Any], conds: list[dict[str, Any]],
                              generation: int, conflicts: list[str], refused: list[str]) -> list[dict[str, Any]]:
        """ChildConflict (a child's name taken by an object this one does not own) and ChildrenApplied (the
        API server refused a child): set when they happen, with a Warning each time their message changes,
        and turned False / True once they are over; absent while they never happened."""
        for ctype, problems, bad, good, reason, fixed in (
                (CHILD_CONFLICT, conflicts, "True", "False", "NameTaken", "NoConflict"),
                (CHILDREN_APPLIED, refused, "False", "True", "Refused", "Applied")):
            message = "; ".join(problems) + (": delete or rename it, or rename this SpeculativeDeployment"
                                              if ctype == CHILD_CONFLICT and problems else "")
            if problems:
                if not st.condition_says(old_status, ctype, bad, message):
                    self.events.warning(obj, "ChildConflict" if ctype == CHILD_CONFLICT else "ChildRefused", message)
                    log.warning("%s/%s: %s", obj["metadata"]["namespace"], obj["metadata"]["name"],
                                bounded(message, st.MAX_MESSAGE))
                conds = st.set_condition(conds, ctype, bad, reason, message, generation)
            elif (st.condition(old_status, ctype) or {}).get("status") == bad:
                conds = st.set_condition(conds, ctype, good, fixed, "every child is this object's own and applied"
                                         if ctype == CHILD_CONFLICT else "the API server accepted every child",
                                         generation)
        return conds

    def _model_cache(self, obj: dict[str, Any], sd: SpeculativeDeployment, old_status: dict[str, Any],
                     conds: list[dict[str, Any]], generation: int) -> list[dict[str, Any]]:
        """The ModelCache condition while a PVC cache is mounted by more than one pod (model_cache.py), with
        a Warning Event each time it turns False or its message changes."""
        cache = sd.spec.engine.model_cache
        claim = cache.claim_name if cache is not None else None
        if claim is None or mc.pods_sharing(sd) is None:
            return [c for c in conds if c.get("type") != mc.MODEL_CACHE]
        namespace = obj["metadata"]["namespace"]
        try:
            finding = mc.assess(sd, claim, self.kube.get(mc.claim_path(namespace, claim)))
        except KubeError as exc:
            if exc.status != 403:
                raise
            finding = mc.Finding("Unknown", "ClaimNotReadable", f"cannot read PersistentVolumeClaim {claim} "
                                                                f"(the operator needs persistentvolumeclaims get): {exc}")
        if finding.status == "False" and not st.condition_says(old_status, mc.MODEL_CACHE, "False", finding.message):
            self.events.warning(obj, f"ModelCache{finding.reason}", finding.message)
        return st.set_condition(conds, mc.MODEL_CACHE, finding.status, finding.reason, finding.message, generation)

    def _children(self, obj: dict[str, Any], live: bool,
                  kinds: tuple[str, ...] = CHILD_KIND_NAMES) -> dict[tuple[str, str], dict[str, Any]]:
        """This object's children as they are now, by (kind, name); owned by its uid, not just labelled.
        From the child cache, or from the API (`live`, or a kind the cache knows nothing of here)."""
        meta = obj["metadata"]
        parent = (meta["namespace"], meta["uid"])
        selector = f"{MANAGED_BY}={MANAGER},{DEPLOYMENT_LABEL}={meta['name']}"
        out = {}
        for api_version, kind, plural in (k for k in CHILD_KINDS if k[1] in kinds):
            known = None if live else self.cache.get(parent, kind)
            if known is None:
                listed = self.kube.list(api_version, plural, meta["namespace"], selector)
                for child in listed:  # a list's items carry neither
                    child.setdefault("apiVersion", api_version)
                    child.setdefault("kind", kind)
                self.cache.seed(parent, kind, listed)
                known = {child["metadata"]["name"]: child for child in listed}
            for child_name, child in known.items():
                if any(r.get("uid") == meta["uid"] for r in child["metadata"].get("ownerReferences") or []):
                    out[(kind, child_name)] = child
        return out

    def _write_status(self, obj: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> None:
        meta = obj["metadata"]
        written = write_changed(self.kube, sd_path(meta["namespace"], meta["name"]), old, new,
                                meta.get("resourceVersion"))
        if written is not None:
            self.bodies.offer(written)


def _drain_of(obj: dict[str, Any]) -> drain.Drain:
    """The drain in force for an object as read (not validated: a spec value that is no whole number counts as
    none, as the reconcile that validates it renders nothing)."""
    seconds = ((obj.get("spec") or {}).get("engine") or {}).get("drainSeconds")
    return drain.in_force(seconds if isinstance(seconds, int) and not isinstance(seconds, bool) else None,
                          (obj.get("status") or {}).get("drain"))


def _announcement(obj: dict[str, Any], child: dict[str, Any], before: dict[str, Any] | None, first: bool,
                  reverting: bool) -> tuple[str, str]:
    """The Event reason and message that say what happened to the child."""
    what = f"{child['kind']} {child['metadata']['name']}"
    if before is None:
        # Missing although nothing asked for a new child (same generation and track plan): restored.
        # A new canary, or a child a spec change adds, is simply created.
        if reverting and not first:
            return "Restored", f"re-created {what}, which was missing"
        return "Created", f"created {what}"
    if reverting:
        return "Reverted", f"reverted a change to {what} made outside the spec"
    return "Updated", f"updated {what} for generation {obj['metadata'].get('generation')} and the current track plan"
