"""``selfheal mcp``: the operations of mcp_server/tools.py served over stdio with the ``mcp``
SDK (the extra ``pytest-selfheal[mcp]``; docs/mcp.md).

The only module that imports the SDK, inside its functions: every ``selfheal`` command imports
this module, and the SDK costs more than the rest of a start. The operations load at the first
call that needs them, so ``initialize`` and the tool list are answered without them.
"""

# No `from __future__ import annotations` here: the SDK reads the tools' annotations at
# registration, and they name classes imported inside build_server.

import dataclasses
import threading
import typing
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, TypeVar, Union
from urllib.parse import unquote, urlparse

from pytest_selfheal import __version__
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.records.mcp import DIGEST, DIGEST_DOC, ClosedRun, RunDecision, RunVerdict

if TYPE_CHECKING:
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
    from mcp.types import CallToolResult
    from pydantic import BaseModel

    from pytest_selfheal.mcp_server.tools import Project, ToolResult
    from pytest_selfheal.repair.patches import ProposedPatch

INSTRUCTIONS = """\
pytest-selfheal: an honest, bounded repair loop for failing pytest runs.
Workflow: run_tests -> show -> edit the code at the target paths -> run_tests, until the
verdict says STOP. CONTINUE means: change the code and call run_tests again without
arguments (that run replays the capture's options and is the open incident's next
iteration). STOP success means fixed and archived; any other STOP reason
(repeated_fingerprint, no_progress, max_iterations, ...) means stop trying and hand over to
the user with the report. Never edit or skip the failing tests to make them pass. apply
needs the user's approval, asked through this client."""

_T = TypeVar("_T")


def _json_type(annotation: Any) -> Any:
    """The type of a :class:`RunVerdict` field as :meth:`RunVerdict.to_json` writes it."""
    if annotation is RunDecision:
        return Literal[tuple(d.value for d in RunDecision)]
    if annotation is ClosedRun:
        return dict[str, Any]
    if typing.get_origin(annotation) is Union:
        return Optional[_json_type(next(a for a in typing.get_args(annotation) if a is not type(None)))]
    if typing.get_origin(annotation) is tuple:
        item = typing.get_args(annotation)[0]
        if typing.get_origin(item) is tuple:  # (key, value) pairs: an object
            return dict[typing.get_args(item)]  # type: ignore[misc]
        return list[item]  # type: ignore[valid-type]
    return annotation


def verdict_model() -> "type[BaseModel]":
    """``run_tests``'s output schema, from :class:`RunVerdict`'s fields."""
    from pydantic import ConfigDict, Field, create_model

    hints = typing.get_type_hints(RunVerdict)
    fields: dict[str, Any] = {}
    for spec in dataclasses.fields(RunVerdict):
        if spec.name == "plugin_lines":
            continue  # the text's only
        kind = _json_type(hints[spec.name])
        doc = spec.metadata.get("doc")
        if spec.name == "decision":
            fields[spec.name] = (kind, Field(description=doc))
        else:
            fields[spec.name] = (Optional[kind], Field(None, description=doc))
    fields[DIGEST] = (Optional[list[str]], Field(None, description=DIGEST_DOC))
    # Only the decision is required: under a small mcp.max_chars only the first keys are sent.
    # Keys added later stay valid for a client that checks an older schema.
    return create_model("Verdict", __config__=ConfigDict(extra="allow"), __doc__=(
        'The structured part of ``run_tests`` (docs/mcp.md "The verdict"). Under a small\n'
        "``mcp.max_chars`` only the first keys are sent (the text has the rest)."), **fields)


@dataclasses.dataclass(frozen=True)
class _AlreadyApplied:
    """Resolver outcome: nothing to ask, the patch is in the tree already."""

    proposed: "ProposedPatch"


class _CannotAsk:
    """Resolver outcome: the client declared no elicitation, so nobody can approve."""


def _result(text: str, data: Optional[dict[str, Any]] = None) -> "CallToolResult":
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _guarded(call: Callable[[], _T]) -> _T:
    """Run one operation; a selfheal error becomes a tool error with its one line."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return call()
    except SelfhealError as exc:
        raise ToolError(str(exc)) from None  # made one bounded, redacted line by call_tool


async def _adopt_roots(project: "Project", ctx: "Context[Any, Any]") -> None:
    """Started outside a project: serve the first MCP root the client names that is one (asked
    at each call until one is found)."""
    if project.confirmed:
        return
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.roots is None:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # roots are deprecated in the newest protocol, still offered by clients
            listed = await ctx.session.list_roots()
    except Exception:
        return
    for root in listed.roots:
        uri = str(root.uri)
        if uri.startswith("file://") and project.adopt(Path(unquote(urlparse(uri).path))):
            return


def operations(make: "Callable[[], Project]") -> "Callable[[], Project]":
    """A function returning ``make()``, made once at its first call (from whichever thread)."""
    made: list[Project] = []
    making = threading.Lock()

    def project() -> "Project":
        with making:
            if not made:
                made.append(make())
            return made[0]

    return project


def build_server(project: "Callable[[], Project]") -> "MCPServer[Any]":
    """Six tools and two resource templates over ``project()``, called only when a request needs it."""
    import asyncio  # with the SDK, which needs it anyway: every other command imports this module

    from mcp.server import MCPServer
    from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.server.mcpserver.resolve import Elicit, Resolve
    from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
    from mcp.types import Resource as MCPResource
    from pydantic import BaseModel, Field, ValidationError

    class Approval(BaseModel):
        """The one answer ``apply`` asks the user for."""

        approve: bool = Field(description="true: apply the proposed patch to your working tree")

    class SelfhealMCPServer(MCPServer[Any]):
        """Tool errors as one redacted line ``<tool>: <message>``; the incidents as resources."""

        async def list_resources(self) -> list[MCPResource]:
            try:
                ids = project().incident_ids()
            except SelfhealError:
                ids = []  # a broken reports root: the tools say why, the list is just empty
            return await super().list_resources() + [
                MCPResource(uri=f"selfheal://{kind}/{incident_id}", name=f"{kind} {incident_id}",
                            mime_type="text/markdown", description=description)
                for incident_id in ids
                for kind, description in (("incident", "digest of the incident (as the show tool)"),
                                          ("report", "RALF Lite Loop Report (as the report tool)"))
            ]

        async def call_tool(
            self, name: str, arguments: dict[str, Any], context: Optional[Context[Any, Any]] = None
        ) -> Union[CallToolResult, InputRequiredResult]:
            # The SDK's argument models ignore unknown names: `run_tests {"args": [...]}` would run
            # the whole suite, silently. A misspelt argument is refused, naming the known ones.
            tool = next((t for t in await self.list_tools() if t.name == name), None)
            known = sorted((tool.input_schema or {}).get("properties", {})) if tool is not None else []
            unknown = sorted(set(arguments) - set(known)) if tool is not None else []
            if unknown:
                raise ToolError(project().error_line(
                    f"{name}: bad arguments: unknown {', '.join(unknown)} (known: {', '.join(known) or 'none'})"))
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError):
                    message = "bad arguments: " + "; ".join(
                        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in cause.errors())
                else:
                    message = str(exc).removeprefix(f"Error executing tool {name}: ")
                raise ToolError(project().error_line(f"{name}: {message}")) from None

    def resource(call: "Callable[[Project], str]") -> str:
        """A resource's text; a selfheal error becomes a resource error of one bounded, redacted line."""
        try:
            return call(project())
        except SelfhealError as exc:
            raise ResourceError(project().error_line(str(exc))) from None

    app = SelfhealMCPServer("selfheal", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    Verdict = verdict_model()
    # Tools that run tests or change files run one at a time (the SDK runs each call in a thread).
    changing = threading.Lock()
    # Hints for clients that decide what to confirm: reading the reports root changes nothing;
    # running tests writes only below it; apply changes the user's working tree.
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    runs = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    async def in_turn(ctx: Context[Any, Any], operation: "Callable[[Project], ToolResult]") -> CallToolResult:
        """An operation that runs tests, one at a time, in a worker thread."""
        await _adopt_roots(project(), ctx)

        def call() -> CallToolResult:
            with changing:
                done = _guarded(lambda: operation(project()))
                return _result(done.text, done.data)

        # An executor future is abandoned on cancel (the SDK's own worker threads are waited
        # for): the call returns at once, and run_tests' cancel event stops pytest's process
        # group within a fraction of a second (the thread then gives the lock back).
        return await asyncio.get_running_loop().run_in_executor(None, call)

    @app.tool(annotations=runs)
    async def run_tests(ctx: Context[Any, Any], selection: Optional[list[str]] = None,
                        pytest_args: Optional[list[str]] = None) -> Annotated[CallToolResult, Verdict]:
        """Run `pytest --selfheal` (optionally only `selection`: node ids or paths; `pytest_args`:
        allowlisted pytest options such as -x, -k EXPR, --tb short; omitted: the open incident's
        own options). A failing run is captured as an incident; with an incident open, the run
        is its next iteration (with the options it was captured with). Returns the verdict:
        CONTINUE or STOP with the stop reason, iteration k of N, fingerprint same/changed,
        progress, counts, and a digest of the failures grouped by root cause (largest first)."""
        cancel = threading.Event()
        try:
            return await in_turn(ctx, lambda served: served.run_tests(selection or [], pytest_args, cancel))
        finally:
            cancel.set()  # cancelled, or the client went away; after a finished run it changes nothing

    @app.tool(annotations=reads)
    def status() -> CallToolResult:
        """List the incidents of this project, newest first: id, status, bucket, attempts, signature."""
        return _result(_guarded(lambda: project().status()).text)

    @app.tool(annotations=reads)
    def show(incident_id: str, group: Optional[int] = None, offset: Optional[int] = None) -> CallToolResult:
        """A bounded digest of one incident (an id, a unique prefix, or `latest`): its root-cause
        groups, largest first, with the source files to fix (target paths) and the failing tests,
        fingerprints, class, triage, the first line of each distinct failure, the plan and the
        attempts. `group` (1, 2, ...): that root-cause group, every failing test with its first
        line, page by page; `offset`: the first test of the page (the page's last line names the next)."""
        return _result(_guarded(lambda: project().show(incident_id, group, offset)).text)

    @app.tool(annotations=runs)
    async def loop(ctx: Context[Any, Any], incident_id: str) -> CallToolResult:
        """Run the verify-only RALF-Lite loop of one incident to its stop (re-runs its failing
        tests; flaky ones that pass resolve it) and return the result."""
        return await in_turn(ctx, lambda served: served.loop(incident_id))

    @app.tool(annotations=reads)
    def report(incident_id: Optional[str] = None) -> CallToolResult:
        """The RALF Lite Loop Report (markdown) of one incident, the latest by default."""
        return _result(_guarded(lambda: project().report(incident_id)).text)

    def ask_approval(incident_id: str, ctx: Context[Any, Any]) -> Union[Elicit[Approval], _AlreadyApplied, _CannotAsk]:
        proposed = _guarded(lambda: project().proposed(incident_id))
        if proposed.already_applied:
            return _AlreadyApplied(proposed)
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return _CannotAsk()
        return Elicit(_guarded(lambda: project().approval_question(proposed)), Approval)

    @app.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
    def apply(
        incident_id: str, approval: Annotated[ElicitationResult[Approval], Resolve(ask_approval)]
    ) -> CallToolResult:
        """Apply the repair patch proposed for an incident (error_runs/ID/final.patch) to the
        working tree, only after the user approves it through this client; a client that cannot
        ask is refused."""
        answer = approval.data if isinstance(approval, AcceptedElicitation) else None
        if isinstance(answer, _AlreadyApplied):
            return _result(f"nothing to do: final.patch of {answer.proposed.incident_id} is already "
                           f"applied to {answer.proposed.working_tree}")
        if isinstance(answer, _CannotAsk):
            resolved = _guarded(lambda: project().proposed(incident_id)).incident_id
            raise ToolError(f"not applied: this client cannot ask the user to approve (no elicitation); "
                            f"the user can apply it by hand: selfheal apply {resolved}")
        if not (isinstance(answer, Approval) and answer.approve):
            return _result("not applied: the user did not approve; the working tree is unchanged")
        with changing:
            return _result(_guarded(lambda: project().apply(project().proposed(incident_id))).text)

    @app.resource("selfheal://incident/{incident_id}", mime_type="text/markdown")
    def incident_resource(incident_id: str) -> str:
        """The bounded digest of one incident (as the show tool)."""
        return resource(lambda served: served.show(incident_id).text)

    @app.resource("selfheal://report/{incident_id}", mime_type="text/markdown")
    def report_resource(incident_id: str) -> str:
        """The RALF Lite Loop Report of one incident (as the report tool)."""
        return resource(lambda served: served.report(incident_id).text)

    return app
