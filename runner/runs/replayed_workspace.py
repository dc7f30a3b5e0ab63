"""Whether a resumed batch row keeps its workspace, to replay its kept tool results.

A retry that reuses no earlier step normally starts from an empty workspace
(:func:`runner.runs.workspace.run_workspace`). Under a provider batch, and for a live row that
resumes after something outside it stopped it part way, a resumed run replays the model
answers and the tool results its earlier attempts kept (:mod:`runner.agent.replay`):
the replayed tool calls do not run again, so the files they wrote must still be there. The
workspace is kept when it is exactly as the last kept tool call left it; otherwise (another
machine, a wiped disk, changed by hand, or a tool stopped half way through writing) the kept
results are forgotten, the workspace is wiped as for any retry and the tools run again (the
requests that follow may then differ, and be sent again), and the run says so.
"""

from __future__ import annotations

from runner.config.project import Project
from runner.runs.options import RunOptions
from runner.runs.workspace import default_workspace
from runner.store.runstore import RunStore


def replayed_workspace(
    project: Project, run_id: str, options: RunOptions, store: RunStore, warnings: list[str]
) -> bool:
    """``True``: keep the run's workspace, its kept tool results are replayed over it (see the
    module doc). A live row that starts over forgets what its earlier attempts kept: a later
    attempt replays what this one is answered."""
    from runner.store.provider_answers import ProviderAnswers
    from runner.store.provider_tools import ProviderToolResults

    if not options.replay_answers:
        if options.store_live_answers:
            ProviderAnswers(store.database, create=False).forget(run_id)
            ProviderToolResults(store.database, create=False).forget(run_id)
        return False
    from runner.agent.replay import replayable_workspace

    workspace = (options.workspace_dir or default_workspace(project.root, run_id)).resolve()
    verdict = replayable_workspace(ProviderToolResults(store.database), run_id, workspace)
    if verdict is False:
        warnings.append(
            "the workspace is not as the earlier attempt's last tool call left it (another machine, a wiped disk, or a "
            "tool stopped while writing): its tool results are not replayed, the tools run again in a fresh workspace, "
            "and the requests that follow them may be sent (and paid for) again"
        )
    return verdict is True
