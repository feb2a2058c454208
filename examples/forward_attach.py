"""Forward + attach from a script: what VS Code or nvim-dap do, done with raydbg's DAP client.

Run:  python examples/forward_attach.py
It starts Ray with raydbg active, pauses a task, finds the session through the gateway,
opens a local forward port (like `raydbg forward`), attaches, prints the stack and the
locals of the paused frame, evaluates an expression, and continues.
"""

import asyncio
import os
import time

import ray

import raydbg
from raydbg.client import Gateway
from raydbg.dap.session import attach_session
from raydbg.dap.transport import open_tcp
from raydbg.forward import Forwarder


@ray.remote
def train_step(step: int) -> float:
    loss = 1.0 / (step + 1)
    breakpoint()
    return loss


async def inspect(gateway: Gateway, session_id: str) -> None:
    forwarder = Forwarder(gateway, session_id)
    port = await forwarder.start()
    print(f"forwarding session {session_id} on 127.0.0.1:{port}")
    reader, writer = await open_tcp("127.0.0.1", port)
    client, stopped = await attach_session(reader, writer)
    thread = stopped["body"]["threadId"]
    frames = await client.stack_trace(thread)
    for frame in frames[:3]:
        print(f"  {frame['name']} at {frame['source'].get('path')}:{frame['line']}")
    scopes = await client.scopes(frames[0]["id"])
    for var in await client.variables(scopes[0]["variablesReference"]):
        print(f"  {var['name']} = {var['value']}")
    print("  loss * 100 =", (await client.evaluate("loss * 100", frames[0]["id"]))["result"])
    await client.continue_(thread)
    await client.disconnect()
    await client.close()
    await forwarder.close()


def wait_for_session(gateway: Gateway) -> str:
    while True:
        for rec in asyncio.run(gateway.sessions()):
            if rec["function"] == "train_step" and rec["attachable"]:
                return str(rec["id"])
        time.sleep(0.1)


if __name__ == "__main__":
    os.environ.setdefault("RAYDBG_WAIT_TIMEOUT", "120")
    ray.init(runtime_env=raydbg.runtime_env())
    from raydbg.agent_host import lifecycle

    lifecycle.up()
    gateway = Gateway.discover(address=lifecycle.gateway_address())
    ref = train_step.remote(3)
    asyncio.run(inspect(gateway, wait_for_session(gateway)))
    print("task result:", ray.get(ref))
