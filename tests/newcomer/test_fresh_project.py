"""The README tour and the tutorial, done as a newcomer does them, in a brand-new project.

One project for the module: agent_persistence is installed from a wheel of this checkout into a
fresh virtualenv (``fresh.py``), ``django-admin startproject`` makes the project, and the
documented settings, URLs, ``asgi.py`` and agent are applied from the files the docs are made of
(``tests/newcomer/project/``; ``test_docs.py`` proves the docs show exactly these files). Then:

- the README tour: ``migrate`` and ``check``, the documented daphne command, the admin's static
  files, the curl that starts a turn, the browser-console snippet that follows it over the
  websocket with the TypeScript client served as a static file (in headless Chromium, logged in
  as the user), the curl that answers the approval, the final answer, and a script that follows
  the turn with a websocket ticket;
- the tutorial: its ``manage.py shell`` script prints what the tutorial shows, piped in and pasted
  on a real pseudo-terminal, and ``runserver`` serves the admin, its static files and the websocket
  route; step 8's model agent streams from OpenAI's Python client against a local server speaking
  its HTTP API;
- what a newcomer runs into: a new terminal without the key (one line, no traceback), the README's
  third terminal (no virtualenv, no ``$CONVERSATION``), and the frontend how-to's Node modules run
  with ``node``.

Only the documented port 8000 is replaced by a free one.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import websockets

from agent_persistence.testing.network import free_port
from tests.browser.cdp import Chromium, Tab, chromium_path
from tests.newcomer.fresh import SNIPPETS, Terminal, build_wheel, new_virtualenv, snippet

pytestmark = pytest.mark.timeout(600)  # the fixture (wheel, virtualenv, project) counts in the first test

OSLO_ANSWER = "Let me look up the weather in Oslo. In Oslo it is light snow, -3 °C."


@pytest.fixture(scope="module")
def terminal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Terminal]:
    workdir = tmp_path_factory.mktemp("newcomer")
    wheel = build_wheel(workdir)
    venv = new_virtualenv(workdir)
    home = workdir / "home"
    home.mkdir()
    shell = Terminal(home, venv, workdir / "terminal")
    shell.run(snippet("install.sh", **{"/path/to/agent_persistence": str(wheel)}), stdin="")
    where = shell.run('python -c "import agent_persistence; print(agent_persistence.__file__)"').strip()
    assert where.startswith(str(venv)), f"agent_persistence must come from the wheel, not {where}"

    shell.run(snippet("startproject.sh"))
    project = shell.cwd
    assert project == home / "mysite"
    with (project / "mysite" / "settings.py").open("a") as settings:
        settings.write("\n\n" + snippet("settings.py-tpl"))
    (project / "mysite" / "urls.py").write_text(snippet("urls.py"))
    (project / "mysite" / "asgi.py").write_text(snippet("asgi.py"))
    (project / "myapp" / "agents.py").write_text(snippet("agents.py"))
    output = shell.run(snippet("setup.sh"))
    assert "Applying agent_persistence.0001" in output
    assert "System check identified no issues (0 silenced)." in output
    assert "Superuser created successfully." in output
    yield shell


def login_cookie(base: str) -> str:
    """Log in through the admin's form, as the person does before opening the console."""
    with httpx.Client(base_url=base, timeout=60) as client:  # generous: a loaded machine
        page = client.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = client.post("/admin/login/?next=/admin/", data={"username": "alice", "password": "secret", "csrfmiddlewaretoken": token})
        assert response.status_code == 302, response.text
        return client.cookies["sessionid"]


def assert_admin_static(base: str) -> None:
    css = httpx.get(base + "/static/admin/css/base.css", timeout=60)
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css"), css.status_code


@pytest.mark.skipif(chromium_path() is None and not os.environ.get("CI"), reason="Chromium is not installed (apt-get install chromium)")
def test_the_readme_tour_in_a_fresh_project(terminal: Terminal) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = terminal.start(snippet("serve.sh", port), "daphne.log")
    try:
        server.wait_http(base + "/admin/login/")
        assert_admin_static(base)

        started = json.loads(terminal.run(snippet("start_turn.sh", port)))
        conversation = terminal.env["CONVERSATION"]
        assert started["conversation_id"] == conversation
        assert started["epoch"] == 1 and started["message_id"] and started["run_id"]

        asyncio.run(follow_in_the_browser(base, login_cookie(base), conversation, terminal, port))
    finally:
        server.stop()
    assert "Traceback" not in server.output(), server.output()


async def follow_in_the_browser(base: str, cookie: str, conversation: str, terminal: Terminal, port: int) -> None:
    with Chromium() as browser:
        async with Tab(browser.new_tab()) as tab:
            await tab.set_cookie(base, "sessionid", cookie)
            await tab.goto(base + "/admin/")
            # The admin is styled: its CSS came through WhiteNoise under daphne.
            header = await tab.evaluate("getComputedStyle(document.getElementById('header')).backgroundColor")
            assert header not in ("", "rgba(0, 0, 0, 0)"), header

            # Pasted into the console: top-level await, as DevTools evaluates it (replMode).
            pasted = await tab.call("Runtime.evaluate", expression=snippet("follow.js", **{"PASTE-THE-CONVERSATION-ID": conversation}),
                                    replMode=True, awaitPromise=True)
            assert "exceptionDetails" not in pasted, pasted
            await tab.wait_for("client.state.interrupts.length > 0", timeout=60)
            asked = await tab.evaluate("client.state.interrupts[0]")
            assert asked["kind"] == "tool_approval"
            assert asked["payload"] == {"tool_call_id": "weather-1", "name": "get_weather", "arguments": {"city": "Oslo"}}

            outputs = terminal.run(snippet("answer.sh", port)).strip().splitlines()
            listed, answered = json.loads(outputs[0]), json.loads(outputs[-1])
            assert [item["id"] for item in listed["interrupts"]] == [asked["id"]]
            assert answered["interrupts"][0]["status"] == "resolved"
            assert answered["continued"]["conversation_id"] == conversation

            final = await tab.wait_for("client.state.final", timeout=60)
            assert final["stop_reason"] == "completed"
            assert final["message"]["content"] == OSLO_ANSWER
            assert final["message"]["tool_calls"] == [
                {"id": "weather-1", "name": "get_weather", "arguments": {"city": "Oslo"},
                 "result": {"city": "Oslo", "forecast": "light snow, -3 °C"}}
            ]
            assert await tab.evaluate("client.text") == OSLO_ANSWER

    # From a script: a ticket from the API (Basic auth), the socket opened with ?ticket= and an Origin.
    (terminal.cwd / "follow.py").write_text(snippet("follow.py", port))
    followed = terminal.run(snippet("follow_with_ticket.sh", port), timeout=120)
    assert followed.strip().splitlines()[-1] == f"completed {OSLO_ANSWER}"


def test_the_tutorial_in_a_fresh_project(terminal: Terminal) -> None:
    printed = terminal.run("python manage.py shell", stdin=snippet("tutorial_shell.py"))
    # Django 5.2+ first says how many models its shell imported; the count is the project's, not the tutorial's.
    printed = re.sub(r"\A\d+ objects? imported automatically \(use -v 2 for details\)\.\n\n?", "", printed)
    assert printed == snippet("tutorial_output.txt")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = terminal.start(snippet("runserver.sh", port), "runserver.log")
    try:
        server.wait_http(base + "/admin/login/")
        assert httpx.get(base + "/admin/login/", timeout=60).status_code == 200
        assert_admin_static(base)
        # Daphne's runserver serves the websocket route: the consumer accepts, then refuses an anonymous socket.
        asyncio.run(assert_websocket_refuses_anonymous(port))
    finally:
        server.stop()
    assert "Traceback" not in server.output(), server.output()


async def assert_websocket_refuses_anonymous(port: int) -> None:
    url = f"ws://127.0.0.1:{port}/ws/conversations/0192f5e4-1111-7000-8000-000000000001/"
    async with websockets.connect(url, additional_headers={"Origin": f"http://127.0.0.1:{port}"}) as socket:
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(socket.recv(), 30)
    assert socket.close_code == 4401


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")


def paste_into(command: list[str], terminal: Terminal, text: str, env: dict[str, str] | None = None) -> str:
    """Run ``command`` on a real pseudo-terminal, wait for its ``>>>`` prompt, paste ``text`` in one write
    (as a terminal emulator pastes), and return what the terminal showed once the prompt is back and quiet."""
    env = {**(env or terminal.env), "TERM": "dumb"}
    executable = shutil.which(command[0], path=env["PATH"])
    primary, secondary = pty.openpty()
    process = subprocess.Popen([executable, *command[1:]], cwd=terminal.cwd, env=env, stdin=secondary, stdout=secondary,
                               stderr=secondary, start_new_session=True)
    os.close(secondary)
    shown = bytearray()

    def read_until(done, timeout: float, quiet: float = 0.0) -> None:
        deadline, last = time.monotonic() + timeout, time.monotonic()
        while time.monotonic() < deadline:
            if done() and time.monotonic() - last >= quiet:
                return
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # EIO: the process closed the terminal
                    chunk = b""
                if not chunk:
                    return
                shown.extend(chunk)
                last = time.monotonic()
        raise AssertionError(f"the shell did not get there in {timeout} s; it showed:\n{clean()}")

    def clean() -> str:
        return ANSI.sub("", shown.decode(errors="replace")).replace("\r\n", "\n").replace("\r", "")

    try:
        read_until(lambda: clean().endswith(">>> "), 120)
        start = len(shown)
        os.write(primary, text.encode())
        read_until(lambda: len(shown) > start and clean().endswith(">>> "), 180, quiet=3.0)
        pasted = clean()
        os.write(primary, b"exit()\n")
        process.wait(30)
        return pasted
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait(10)
        os.close(primary)


def test_the_tutorial_pasted_into_an_interactive_shell(terminal: Terminal) -> None:
    """Pasted, not piped: the interactive console ends a block at a blank line, so one inside ``async def`` breaks it."""
    shown = paste_into(["python", "manage.py", "shell", "-i", "python"], terminal, snippet("tutorial_shell.py"))
    for word in ("Error", "Traceback"):
        assert word not in shown, shown
    position = 0
    for line in snippet("tutorial_output.txt").splitlines():
        found = shown.find(line + "\n", position)
        assert found >= 0, f"{line!r} is not shown (in order):\n{shown}"
        position = found + len(line)


def test_a_new_terminal_without_the_key_is_told_what_to_do(terminal: Terminal) -> None:
    """A new terminal has no AGENT_PERSISTENCE_KEY: manage.py says so in one line, not with a KeyError traceback."""
    env = {name: value for name, value in terminal.env.items() if name != "AGENT_PERSISTENCE_KEY"}
    for command in (["python", "manage.py", "check"], ["python", "manage.py", "runserver", "127.0.0.1:0"],
                    ["daphne", "-b", "127.0.0.1", "-p", "0", "mysite.asgi:application"]):
        executable = shutil.which(command[0], path=env["PATH"])
        result = subprocess.run([executable, *command[1:]], cwd=terminal.cwd, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and "KeyError" not in result.stderr, result.stderr
        assert result.stderr.strip() == (
            "AGENT_PERSISTENCE_KEY is not set in this terminal: export the key you made for this project "
            "(export AGENT_PERSISTENCE_KEY=...). A new key cannot decrypt what the old one encrypted; "
            "make the first one with: python -m agent_persistence.keygen"
        ), result.stderr


def wait_for_interrupt(base: str, conversation: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = httpx.get(f"{base}/api/agents/conversations/{conversation}/interrupts/", auth=("alice", "secret"), timeout=30)
        if listed.status_code == 200 and listed.json()["interrupts"]:
            return
        time.sleep(0.2)
    raise AssertionError(f"no interrupt in {timeout} s")


def test_the_third_terminal_of_the_tour(terminal: Terminal) -> None:
    """Step 6's follower, run "in a third terminal now": a new terminal, without the virtualenv or $CONVERSATION."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    (terminal.cwd / "follow.py").write_text(snippet("follow.py", port))
    server = terminal.start(snippet("serve.sh", port), "daphne-third-terminal.log")
    try:
        server.wait_http(base + "/admin/login/")
        terminal.run(snippet("start_turn.sh", port))  # the second terminal
        conversation = terminal.env["CONVERSATION"]
        venv = Path(terminal.env["VIRTUAL_ENV"])

        # Without the documented preamble, the follower says what is missing (an interactive shell has no `set -u`).
        bare = Terminal(terminal.cwd.parent, venv, terminal.state.parent / "bare-terminal", activated=False)
        attempt = subprocess.run(["bash", "-c", "cd mysite; " + snippet("follow_with_ticket.sh", port)], cwd=bare.cwd,
                                 env=bare.env, capture_output=True, text=True, timeout=120)
        assert attempt.returncode != 0
        assert "CONVERSATION: is not set in this terminal" in attempt.stderr and "Traceback" not in attempt.stderr, attempt.stderr

        third = Terminal(terminal.cwd.parent, venv, terminal.state.parent / "third-terminal", activated=False)
        third.run(snippet("third_terminal.sh", **{"/path/to/venv": str(venv), "PASTE-THE-CONVERSATION-ID": conversation}))
        assert third.cwd == terminal.cwd and third.env["CONVERSATION"] == conversation
        follower = third.start(snippet("follow_with_ticket.sh", port), "third-terminal.log")
        try:
            wait_for_interrupt(base, conversation)
            terminal.run(snippet("answer.sh", port))  # back in the second terminal
            follower.process.wait(120)
        finally:
            follower.stop()
        assert follower.process.returncode == 0, follower.output()
        assert follower.output().strip().splitlines()[-1] == f"completed {OSLO_ANSWER}", follower.output()
    finally:
        server.stop()
    assert "Traceback" not in server.output(), server.output()


@pytest.mark.skipif((shutil.which("node") is None or shutil.which("npm") is None) and not os.environ.get("CI"),
                    reason="Node.js (node, npm) is not installed")
def test_the_node_snippets_of_the_frontend_howto(terminal: Terminal, tmp_path: Path) -> None:
    """The how-to's two Node modules, run with node as its "Running these in Node" says, against the tour's daphne.

    The folder holds ``ws`` (npm install) and the client; the client is the build the wheel serves as
    static files (the same sources as the npm tarball, which is not packed here: ``npm pack`` builds
    it with tsc, beyond this test's time)."""
    from tests.newcomer.test_docs import node_snippets

    snippets = node_snippets()
    app = tmp_path / "node-app"
    app.mkdir()
    installed = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", "ws@^8.23.0"], cwd=app,
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    static = Path(terminal.run('python -c "import agent_persistence, pathlib; '
                               'print(pathlib.Path(agent_persistence.__file__).parent / \'static/agent_persistence/client\')"').strip())
    client = app / "node_modules" / "@agent-persistence" / "client"
    shutil.copytree(static, client)
    (client / "package.json").write_text(json.dumps({"name": "@agent-persistence/client", "type": "module", "exports": {".": "./index.js"}}))

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    for name, body in snippets.items():
        assert body.count('"https://example.com"') == 1, name
        (app / name).write_text(body.replace('"https://example.com"', f'"{base}"'))
    node_env = {name: value for name, value in terminal.env.items() if name not in ("VIRTUAL_ENV", "AGENT_PERSISTENCE_KEY")}
    server = terminal.start(snippet("serve.sh", port), "daphne-node.log")
    try:
        server.wait_http(base + "/admin/login/")
        terminal.run(snippet("start_turn.sh", port))
        conversation = terminal.env["CONVERSATION"]
        # The ticket follower is started with the turn and sees it through the approval.
        with_ticket = subprocess.Popen(["node", "follow-with-ticket.mjs", conversation], cwd=app, env=node_env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for_interrupt(base, conversation)
            terminal.run(snippet("answer.sh", port))
            out, err = with_ticket.communicate(timeout=120)
        finally:
            if with_ticket.poll() is None:
                with_ticket.kill()
                with_ticket.wait(10)
        assert with_ticket.returncode == 0, err
        assert out.strip().splitlines()[-1] == f"completed {OSLO_ANSWER}", out + err
        # The cookie follower attaches to the finished turn and gets its final frame.
        with_cookie = subprocess.run(["node", "follow-with-cookie.mjs", conversation], cwd=app,
                                     env={**node_env, "SESSION_ID": login_cookie(base)}, capture_output=True, text=True, timeout=120)
        assert with_cookie.returncode == 0, with_cookie.stderr
        assert with_cookie.stdout.strip().splitlines()[-1] == f"completed {OSLO_ANSWER}", with_cookie.stdout
    finally:
        server.stop()
    assert "Traceback" not in server.output(), server.output()


class FakeOpenAI(ThreadingHTTPServer):
    """A local server speaking OpenAI's Chat Completions API, streamed (server-sent events), as the SDK calls it.

    It answers from the messages it is sent, so the second answer shows the first turn reached the model:
    "Oslo ..." to the capital question, then the population of Oslo only when that answer is in the history."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FakeOpenAIHandler)
        self.requests: list[dict] = []

    @staticmethod
    def answer(messages: list[dict]) -> str:
        last = messages[-1]["content"]
        if "capital of Norway" in last:
            return "The capital of Norway is Oslo."
        if any(message["role"] == "assistant" and "Oslo" in (message["content"] or "") for message in messages):
            return "Oslo has about 720,000 inhabitants."
        return "Which city do you mean?"


class FakeOpenAIHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        server: FakeOpenAI = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/chat/completions" or self.headers.get("Authorization") != "Bearer test-key" or not body.get("stream"):
            self.send_response(400)
            self.end_headers()
            return
        server.requests.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        words = FakeOpenAI.answer(body["messages"]).split(" ")
        deltas = [{"role": "assistant", "content": ""}] + [{"content": (" " if n else "") + word} for n, word in enumerate(words)]
        for number, delta in enumerate([*deltas, {}]):
            chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "delta": delta, "finish_reason": None if delta else "stop"}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.01)
        self.wfile.write(b"data: [DONE]\n\n")


def test_the_tutorial_model_agent_streams_from_the_openai_sdk(terminal: Terminal) -> None:
    """Step 8 of the tutorial: a plain Agent that maps turn.transcript to Chat Completions messages and streams
    the answer with OpenAI's own Python client, here against a local server speaking its HTTP API."""
    project = terminal.cwd
    (project / "myapp" / "model_agents.py").write_text(snippet("model_agents.py"))
    with (project / "mysite" / "settings.py").open("a") as settings:
        settings.write("\n" + snippet("model_settings.py-tpl"))
    fake = FakeOpenAI()
    thread = threading.Thread(target=fake.serve_forever, daemon=True)
    thread.start()
    try:
        terminal.run(snippet("model_setup.sh", **{"sk-...": "test-key"}))
        terminal.run(f"export OPENAI_BASE_URL=http://127.0.0.1:{fake.server_port}/v1")
        printed = terminal.run("python manage.py shell", stdin=snippet("model_shell.py"))
        # A conversation whose first answer called a tool (the tutorial's helper), then a turn of the model agent.
        script = snippet("tutorial_shell.py")
        assert script.count("    print(await handle.task)\n\n\nasyncio.run(main())") == 1
        with_tool = terminal.run("python manage.py shell", stdin=script.replace(
            "    print(await handle.task)\n\n\nasyncio.run(main())",
            "    print(await handle.task)\n"
            "    handle = await start_turn(scope, conversation_id, content='Thanks!', agent='writer')\n"
            "    print(await handle.task)\n\n\nasyncio.run(main())"))
        assert "Outcome.COMPLETED\nOutcome.COMPLETED\n" in with_tool, with_tool
    finally:
        fake.shutdown()
        fake.server_close()
    printed = re.sub(r"\A\d+ objects? imported automatically \(use -v 2 for details\)\.\n\n?", "", printed)
    assert printed == snippet("model_output.txt")
    system = {"role": "system", "content": "You are a helpful assistant. Answer in one sentence."}
    assert [request["messages"] for request in fake.requests] == [
        [system, {"role": "user", "content": "What is the capital of Norway?"}],
        [system, {"role": "user", "content": "What is the capital of Norway?"},
         {"role": "assistant", "content": "The capital of Norway is Oslo."}, {"role": "user", "content": "And its population?"}],
        [system, {"role": "user", "content": "What is the weather in Lisbon?"},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "weather-1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}}]},
         {"role": "tool", "tool_call_id": "weather-1", "content": '{"city": "Lisbon", "forecast": "sunny, 19 \\u00b0C"}'},
         {"role": "assistant", "content": "Let me look up the weather in Lisbon. In Lisbon it is sunny, 19 °C."},
         {"role": "user", "content": "Thanks!"}],
    ]


def test_every_snippet_file_is_used() -> None:
    used = {"install.sh", "startproject.sh", "settings.py-tpl", "urls.py", "asgi.py", "agents.py", "setup.sh",
            "serve.sh", "start_turn.sh", "follow.js", "answer.sh", "tutorial_shell.py", "tutorial_output.txt", "runserver.sh",
            "follow.py", "follow_with_ticket.sh", "third_terminal.sh", "model_setup.sh", "model_agents.py",
            "model_settings.py-tpl", "model_shell.py", "model_output.txt"}
    assert {path.name for path in Path(SNIPPETS).iterdir() if path.is_file()} == used
