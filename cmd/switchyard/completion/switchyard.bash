# bash completion for switchyard: `switchyard completion bash` prints it; `make install` puts it
# in $(PREFIX)/share/bash-completion/completions/switchyard. The binary answers each request
# itself (--generate-bash-completion), so commands, flags and the running daemon's VIP names are
# always those of the installed version.
_switchyard_complete() {
	local cur="${COMP_WORDS[COMP_CWORD]}"
	local -a words=("${COMP_WORDS[@]:0:COMP_CWORD}")
	local opts
	if [[ "$cur" == -* ]]; then
		opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
	else
		opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
	fi
	COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -o bashdefault -o default -F _switchyard_complete switchyard
