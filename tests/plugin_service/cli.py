def add_commands(sub, client_opts) -> None:
    sp = sub.add_parser("echo", help="the throwaway service's command")
    client_opts(sp)
    sp.add_argument("n", type=int)
    sp.set_defaults(func=lambda args: print(args.n))
