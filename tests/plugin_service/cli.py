"""`praxon echo N`: start an echo.count job and follow it to its end."""


def add_commands(sub, client_opts) -> None:
    sp = sub.add_parser("echo", help="the throwaway service's command: count to N in a job")
    client_opts(sp)
    sp.add_argument("n", type=int)
    sp.set_defaults(func=_echo)


def _echo(args) -> None:
    from services.common.client import resolve_target, wait_for_success
    from tests.plugin_service import echo_pb2, echo_pb2_grpc

    target = resolve_target(args.address, args.token, args.data_dir)
    stub = echo_pb2_grpc.EchoServiceStub(target.channel())
    reply = stub.StartEchoJob(echo_pb2.StartEchoJobRequest(n=args.n), metadata=target.metadata, timeout=30)
    wait_for_success(target, reply.job_id, "echo")
