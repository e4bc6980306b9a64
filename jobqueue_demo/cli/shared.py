"""What every command module shares: the typer app, the global options, the options several
commands take (defined once, as Annotated aliases) and messages to standard error.

A leaf: command modules import it, it imports none of them, so main.py can import the
command modules at its top. Annotations are not postponed, as in run.py: typer reads them.
"""

import math
import sys
from dataclasses import dataclass
from typing import Annotated, List, Optional

import typer
from typer._click.core import Context
from typer._click.exceptions import ClickException
from typer._click.formatting import HelpFormatter
from typer.core import TyperGroup

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 expectations not met or the schedule got stuck; "
    "2 bad scenario or usage; 3 server or connection problem; 4 standard output could not be written; "
    "130 interrupted (Ctrl-C), 143 SIGTERM, 129 SIGHUP (128 + the signal's number)."
)



def continued(text: str, width: int) -> str:
    """`text` with each example command wider than `width` broken at spaces into shell
    continuation lines (` \\`), so it fits and still runs as pasted."""
    out = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        lead = line[: len(line) - len(body)]
        if not body.startswith("jobqueue-demo ") or len(line) <= width:
            out.append(line)
            continue
        piece = lead
        for word in _option_units(body.split(" ")):
            if piece.strip() and len(piece) + 1 + len(word) + 2 > width:
                out.append(piece + " \\")
                piece = lead + "    " + word
            else:
                piece = f"{piece} {word}" if piece.strip() else piece + word
        out.append(piece)
    return "\n".join(out)


def _option_units(words: list[str]) -> list[str]:
    """The words of a command, each option kept with its value: a line breaks before options."""
    units: list[str] = []
    for word in words:
        if units and units[-1].startswith("-") and " " not in units[-1] and not word.startswith("-"):
            units[-1] += " " + word
        else:
            units.append(word)
    return units


class ExamplesFormatter(HelpFormatter):
    """Click's help formatter, which keeps a `\\b` block's lines as they are however wide:
    the examples' long commands are continued instead."""

    def write_text(self, text: str) -> None:
        super().write_text(continued(text, self.width - self.current_indent))

    # The longest word an option's help must keep whole, a DSN template (30 characters), and
    # some room: at 60 columns the options' column gives way (a long name goes on a line of
    # its own) rather than the template being split mid-word.
    MIN_HELP_COLUMN = 34

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        room = self.width - self.current_indent - col_spacing - 2 - self.MIN_HELP_COLUMN
        super().write_dl(rows, max(min(col_max, room), 8), col_spacing)


class HelpContext(Context):
    formatter_class = ExamplesFormatter


class Group(TyperGroup):
    """The app's group: every command's help written by ExamplesFormatter."""

    context_class = HelpContext

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        if command is not None:
            command.context_class = HelpContext
        return command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ClickException as error:
            # Click prints "Error: <message>" as one line, however wide the terminal.
            error.format_message = _fitted_message(error.format_message)
            raise


def _fitted_message(message):
    """`message()` wrapped so that, after click's "Error: ", it fits the terminal."""

    def fitted_message() -> str:
        text = message()
        if not sys.stderr.isatty():
            return text
        from ..render.wrap import terminal_width, wrap_lines

        lines = wrap_lines(f"Error: {text}", terminal_width(sys.stderr), "   ")
        return "\n".join([lines[0][len("Error: "):], *lines[1:]])

    return fitted_message


app = typer.Typer(
    cls=Group,
    help="Run job-queue lessons (SELECT ... FOR UPDATE SKIP LOCKED and friends) on a real "
    "MariaDB, MySQL or PostgreSQL server and print them as transcripts.\n\n" + EXIT_CODES_HELP,
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
)

DSN_FORMS = (
    "mysql://user:pass@host:port/db (or ?unix_socket=/path), or postgresql://user@host:port/db (or ?host=/socket/dir)"
)
DSN_HELP = (
    f"Server to use: {DSN_FORMS}. "
    "Default: $JOBQUEUE_DEMO_DSN, else a private throwaway server (see --engine) started for this run."
)
ENGINE_HELP = (
    "The private throwaway server's engine when no --dsn is given: mysql (MariaDB or MySQL, the "
    "default) or postgresql. A DSN names its own engine; $JOBQUEUE_DEMO_DSN is used only when it "
    "is of this engine."
)
STEP_TIMEOUT_HELP = (
    "Longest wait for any one statement, fault or result, in seconds; also how long a server "
    "that stops answering is waited for (exit 3)."
)
MAX_SECONDS = 3600.0
# isolationtester's max_step_wait, and the variable that sets it (in seconds).
ISOLATIONTESTER_WAIT_S = 300.0
ISOLATIONTESTER_WAIT_VAR = "PGISOLATIONTIMEOUT"


def step_timeout_option(default_said: str):
    """--step-timeout where its default depends on what is run (None when not given)."""
    return Annotated[
        Optional[float],
        typer.Option("--step-timeout", min=0.1, max=MAX_SECONDS, callback=finite, show_default=False,
                     help=f"{STEP_TIMEOUT_HELP} {default_said}"),
    ]


def step_timeout_or(given: float | None, isolationtester: bool) -> float:
    """--step-timeout as given, else the tool's 10 s; for an isolation spec's output (printed or
    checked) isolationtester's own wait, so that a slow step of a spec is waited for (and
    cancelled) as isolationtester does."""
    import os

    if given is not None:
        return given
    if not isolationtester:
        return 10.0
    # Whole seconds, as isolationtester reads them; a value that is no number is left aside.
    value = os.environ.get(ISOLATIONTESTER_WAIT_VAR, "").strip()
    if not value.isdigit():
        return ISOLATIONTESTER_WAIT_S
    return min(max(float(value), 0.1), MAX_SECONDS)


def finite(value: float | None) -> float | None:
    """A range check lets NaN through (every comparison with it is false)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter("must be a number of seconds")
    return value


Cluster = Annotated[
    Optional[int],
    typer.Option(
        "--cluster", metavar="NODES", min=2, max=9, show_default=False,
        help="Run on a private embedded Galera cluster of NODES nodes (a lesson with 'cluster:' starts one itself).",
    ),
]
Dsn = Annotated[Optional[str], typer.Option("--dsn", help=DSN_HELP, show_default=False)]
# The commands that can run on a Galera cluster take --dsn once per node.
Dsns = Annotated[
    Optional[List[str]],
    typer.Option(
        "--dsn", show_default=False,
        help=DSN_HELP + " A Galera cluster's nodes: once per node, --dsn node1=mysql://… --dsn node2=mysql://…",
    ),
]
SHOW_LOCKS_HELP = (
    "After each statement that locked rows, how many index records it locked against the rows it "
    "returned or changed (InnoDB's count for its transaction)."
)
ShowLocks = Annotated[bool, typer.Option("--show-locks", help=SHOW_LOCKS_HELP)]
StepTimeout = Annotated[
    float, typer.Option("--step-timeout", help=STEP_TIMEOUT_HELP, min=0.1, max=MAX_SECONDS, callback=finite)
]


def pace_option(help: str):
    """--pace SECONDS, checked alike wherever a run can step itself (`run`, `serve`)."""
    return typer.Option(
        None, "--pace", metavar="SECONDS", min=0.0, max=MAX_SECONDS, callback=finite, show_default=False, help=help,
    )


@dataclass(eq=False)
class GlobalOptions:
    """The options given before the command, read by main() and by server_for()."""

    debug: bool = False
    allow_shared_user: bool = False
    engine: str | None = None  # None: $JOBQUEUE_DEMO_DSN's engine, else mysql


def _engine(value: str | None) -> str | None:
    # The one-line error `workers --engine` gave, now that it is this option wherever it stands.
    if value is not None:
        from .. import api

        api.check_engine_name(value)
    return value


options = GlobalOptions()


def _print_version(asked: bool) -> None:
    if asked:
        from .. import __version__

        print(f"jobqueue-demo {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    allow_shared_user: bool = typer.Option(
        False, "--allow-shared-user",
        help="Run scenario SQL as the DSN's own user when it may not create the per-run user "
        "that confines it to the scratch database.",
    ),
    engine: Optional[str] = typer.Option(None, "--engine", help=ENGINE_HELP, callback=_engine, show_default=False),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    options.debug = debug
    options.allow_shared_user = allow_shared_user
    options.engine = engine


def server_for(dsn: str | list[str] | None, scenarios: tuple = (), cluster: int | None = None):
    """The server for a command, as the global options say; a scenario not written for its
    engine is refused before the server starts. A Galera cluster when `cluster` or a scenario
    asks for one (`cluster: N`): embedded, unless --dsn names each node (nodeN=…)."""
    from .. import api

    single, nodes = api.split_dsns(dsn)
    engine = options.engine
    if engine is None and single is None and scenarios and all(s.spec is not None for s in scenarios):
        engine = "postgresql"  # an isolation spec is PostgreSQL's: its embedded server, unless a DSN says otherwise
    api.check_engine(scenarios, single, engine)
    size = cluster or max((s.cluster or 0 for s in scenarios), default=0) or len(nodes) or None
    return api.server(single, options.allow_shared_user, engine, size, nodes)


def fitted(text: str, stream, indent: str = "   ") -> str:
    """`text` wrapped to the terminal `stream` writes to (render/wrap.py), continuation lines
    starting with `indent`; as it is in a file or a pipe."""
    if not stream.isatty():
        return text
    from ..render.wrap import terminal_width, wrap_lines

    return "\n".join(wrap_lines(text, terminal_width(stream), indent))


class GuardedStdout:
    """Standard output whose failures are typed errors (errors.OutputError), so every command
    ends them as one line and an exit code, its clean-up done on the way out. After a failure
    the descriptor points at /dev/null: the interpreter's own flush at exit finds nothing to
    complain about."""

    def __init__(self, stream, closed: bool = False):
        self._stream = stream
        self._closed = closed
        # The first failure, raised again by every later write: a caller that caught it (click
        # probes the stream with a write it expects may fail) must not make /dev/null look
        # like a standard output that took the text.
        self._failed: Exception | None = None

    def write(self, text: str) -> int:
        return self._guarded(lambda stream: stream.write(text))

    def flush(self) -> None:
        # A closed standard output has nothing pending: only a write tells it is closed. Nor
        # has one that failed (its descriptor is /dev/null now): the interpreter flushes it
        # at exit, where an error is a traceback.
        if not self._closed and self._failed is None:
            self._guarded(lambda stream: stream.flush())

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    def _guarded(self, act):
        from ..errors import OutputError, ReaderGone

        if self._closed:
            raise OutputError("cannot write standard output: it is closed")
        if self._failed is not None:
            raise self._failed
        try:
            return act(self._stream)
        except OSError as exc:
            import errno

            self._silence()
            if exc.errno == errno.EPIPE:
                self._failed = ReaderGone("standard output's reader has gone")
            else:
                self._failed = OutputError(f"cannot write standard output: {exc.strerror or exc}")
            raise self._failed from None

    def _silence(self) -> None:
        import os

        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        except (OSError, ValueError):  # not a descriptor of its own: nothing flushes it at exit
            pass
        finally:
            os.close(null)


def guard_stdout() -> None:
    """Standard output through GuardedStdout. A closed descriptor 1 is given /dev/null, so no
    file or socket the run opens lands on it, and the first write says it is closed."""
    if isinstance(sys.stdout, GuardedStdout):
        return
    if sys.stderr is None:
        # Started with descriptor 2 closed: /dev/null takes it, so the first socket the run
        # opens does not (a client library's warning would go to the server), and the error
        # lines, unread, leave the exit code the table's.
        sys.stderr = _devnull_on(2)
    # An encoding that cannot hold every character (PYTHONIOENCODING=ascii, latin-1): what it
    # cannot is written out as \u2014, rather than ending the run with a traceback mid-line.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if sys.stdout is not None:
        sys.stdout = GuardedStdout(sys.stdout)
        return
    sys.stdout = GuardedStdout(_devnull_on(1), closed=True)


def _devnull_on(fd: int):
    """/dev/null on a closed standard descriptor, as a text stream."""
    import os

    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
    return open(fd, "w", closefd=False)


def say(text: str) -> None:
    """A line on standard error. Its text may hold a server's words (a connection refused with
    whatever bytes the other end sent): control characters are written out, never acted on."""
    from .. import api

    print(fitted(api.shown(text), sys.stderr), file=sys.stderr, flush=True)


def heading(text: str, to_stderr: bool) -> None:
    if to_stderr:
        say(text)
    else:
        print(fitted(text, sys.stdout), flush=True)


def told_quit(stop) -> None:
    """A stepped run the user ended (q, or a stop signal while it waited for a key): said, and
    a stop signal's exit code; q ends the command normally."""
    from ..render.stepper import Interrupted

    say(f"-- {stop}: sessions rolled back, scratch database dropped")
    say_notes(stop)
    if isinstance(stop, Interrupted):
        raise typer.Exit(stop.stop.exit_code) from None


def say_notes(exc: BaseException) -> None:
    """What a clean-up after this error (or Ctrl-C) could not do, as notes on it or its causes."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        for note in getattr(exc, "__notes__", ()):
            say(f"jobqueue-demo: {note}")
        exc = exc.__cause__ or exc.__context__
