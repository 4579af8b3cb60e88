"""Rules for HTTP clients and rsync: uploads, credentials sent elsewhere, downloads to run."""

from __future__ import annotations

import re

from agent.risk.core import JudgeCore
from agent.risk.vocabulary import CURL_LONG, CURL_SENDS, CURL_VALUES, base_name, options, secret_variables
from agent.shell import Simple, Word


class NetworkRules(JudgeCore):
    def curl(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        opts = options(args, CURL_VALUES, CURL_LONG)
        methods = [m.upper() for m in opts.values("-X", "--request")]
        if any(name in CURL_SENDS for name, _ in opts.flags):
            self.add("curl (send)", "sends data over the network (curl with data or an upload)")
        elif methods and methods[-1] not in ("GET", "HEAD", "OPTIONS"):
            self.add(f"curl -X {methods[-1]}", f"sends a {methods[-1]} request over the network")
        elif opts.has("-K", "--config"):
            self.add("curl -K", "takes its options from a file this check cannot see")
        self.network_arguments(prog, args, opts.args, xargs)
        for out in opts.values("-o", "--output"):
            self.downloaded.add(base_name(out))
        if opts.has("-O", "--remote-name", "--remote-name-all"):
            self.downloaded.update(base_name(w.text.split("?")[0]) for w in opts.args)

    def network_arguments(self, prog: str, args: list[Word], urls: list[Word], xargs: bool) -> None:
        """A request built from another command's output, or carrying a credential in its address."""
        if any(w.substituted for w in args):
            self.add(
                f"{prog} $(…)",
                "puts another command's output into a network request (a way to send data out)",
            )
        elif xargs:
            self.add(f"xargs {prog}", "builds a network request from another command's output")
        else:
            secrets = secret_variables(urls)
            if secrets:
                self.add(f"{prog} ${secrets[0]}", f"puts the credential ${secrets[0]} into a web address")

    def wget(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        opts = options(args, "OoaPeUtTwQlAIXDRBi", ("--post-data", "--post-file", "--body-data", "--body-file",
                                                      "--method", "--output-document", "--header", "--user",
                                                      "--password", "--directory-prefix"))  # fmt: skip
        methods = [m.upper() for m in opts.values("--method")]
        if opts.has("--post-data", "--post-file", "--body-data", "--body-file") or (methods and methods[-1] not in ("GET", "HEAD")):  # fmt: skip
            self.add("wget (send)", "sends data over the network (wget with a request body)")
        if opts.has("-i", "--input-file", "-e", "--execute"):
            self.add("wget -i", "takes its addresses or commands from elsewhere")
        self.network_arguments(prog, args, opts.args, xargs)
        outputs = opts.values("-O", "--output-document")
        self.downloaded.update(base_name(o) for o in outputs if o != "-")
        if not outputs:
            self.downloaded.update(base_name(w.text.split("?")[0]) for w in opts.args)

    def httpie(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        positional = [w.text for w in args if not w.text.startswith("-")]
        if positional and positional[0].upper() in ("POST", "PUT", "PATCH", "DELETE"):
            self.add(
                f"{prog} {positional[0].upper()}", f"sends a {positional[0].upper()} request over the network"
            )
        elif any(re.search(r"^[^:=@/]*(:=|=|@)", p) and "==" not in p for p in positional[1:]):
            self.add(f"{prog} (send)", "sends data over the network")
        self.network_arguments(prog, args, args, xargs)

    def rsync(self, cmd: Simple, prog: str, args: list[Word], xargs: bool) -> None:
        texts = [w.text for w in args]
        if any(t.startswith("--delete") or t == "--remove-source-files" for t in texts):
            self.add("rsync --delete", "deletes files at the destination")
        if any(re.match(r"^[^/]*[^/:\\]:", t) or t.startswith("rsync://") for t in texts if not t.startswith("-")) or any(
            t in ("-e", "--rsh") or t.startswith("--rsh=") for t in texts
        ):  # fmt: skip
            self.add("rsync (remote)", "copies files to or from another machine")
