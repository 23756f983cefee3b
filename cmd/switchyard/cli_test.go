package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVersion: --version names the version, the commit, the Go version and the BPF objects'
// digest.
func TestVersion(t *testing.T) {
	out, err := runLab(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^switchyard \S+ \(commit \S+, go1\.\d+\S*, bpf objects sha256:[0-9a-f]{16}\)\n$`)
	if !re.MatchString(out) {
		t.Errorf("--version printed %q, want it to match %s", out, re)
	}
}

// TestUnknownCommandSuggests: a mistyped subcommand fails naming the nearest one.
func TestUnknownCommandSuggests(t *testing.T) {
	for args, want := range map[string]string{
		"vip lst":       "did you mean `switchyard vip list`?",
		"vipp":          "did you mean `switchyard vip`?",
		"lb stauts":     "did you mean `switchyard lb status`?",
		"backend drian": "did you mean `switchyard backend drain`?",
		"lab exp":       "did you mean `switchyard lab experiment`?",
		"zzzz":          "unknown command \"zzzz\": see `switchyard --help`",
	} {
		out, err := runLab(t, strings.Fields(args)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v (output %q), want %q", args, err, out, want)
		}
	}
	// A group with no argument still shows its help.
	if out, err := runLab(t, "vip"); err != nil || !strings.Contains(out, "COMMANDS:") {
		t.Errorf("vip alone: %v\n%s", err, out)
	}
}

// TestCompletion: `completion bash` is a bash script that completes commands by asking the
// binary; `completion zsh` is a zsh completion function (checked by zsh -n when zsh is here).
func TestCompletion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "switchyard")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script, err := exec.Command(bin, "completion", "bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	sh := string(script) + `
COMP_WORDS=("$BIN" vi); COMP_CWORD=1; _switchyard_complete; echo "top: ${COMPREPLY[*]}"
COMP_WORDS=("$BIN" vip l); COMP_CWORD=2; _switchyard_complete; echo "vip: ${COMPREPLY[*]}"
COMP_WORDS=("$BIN" completion ""); COMP_CWORD=2; _switchyard_complete; echo "shells: ${COMPREPLY[*]}"
complete -p switchyard
`
	cmd := exec.Command("bash", "-c", sh)
	cmd.Env = append(os.Environ(), "BIN="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	for _, want := range []string{"top: vip\n", "vip: list ls\n", "shells: bash zsh\n", "-F _switchyard_complete switchyard"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("bash completion output lacks %q:\n%s", want, out)
		}
	}
	z, err := exec.Command(bin, "completion", "zsh").Output()
	if err != nil || !strings.HasPrefix(string(z), "#compdef switchyard") {
		t.Fatalf("completion zsh: %v\n%s", err, z)
	}
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Log("zsh not installed: zsh -n skipped (apt-get install zsh)")
	} else {
		// The completion function, run with zsh's completion helpers stubbed: _describe gets
		// what the binary answers for the words typed so far.
		zf := filepath.Join(t.TempDir(), "_switchyard")
		os.WriteFile(zf, z, 0o644)
		cmd := exec.Command("zsh", "-f", "-c", `compdef() { :; }
_describe() { print -l -- "${(@P)2}"; }
_files() { print FILES; }
source "$ZF"
words=("$BIN" vi); _switchyard; echo "--"
words=("$BIN" vip l); _switchyard`)
		cmd.Env = append(os.Environ(), "BIN="+bin, "ZF="+zf)
		out, err := cmd.CombinedOutput()
		top, sub, _ := strings.Cut(string(out), "--\n")
		if err != nil || !strings.Contains(top, "vip\n") || !strings.Contains(top, "lab\n") || !strings.Contains(sub, "list\n") || !strings.Contains(sub, "remove\n") {
			t.Errorf("zsh completion: %v\n%s", err, out)
		}
	}
	if out, err := runLab(t, "completion", "fish"); err == nil || !strings.Contains(err.Error(), "bash or zsh") {
		t.Errorf("completion fish: %v %s", err, out)
	}
}
