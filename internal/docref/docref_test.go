package docref

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the directory holding go.mod above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// anchor is GitHub's anchor for a heading: lowercase, spaces to '-', every other character that
// is not a letter, digit, '-' or '_' removed.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	// a run-in heading: a paragraph that starts with a bold phrase ending in a full stop
	// ("**Allow-lists.** Anyone who..."), which the docs cite as a section too.
	runInRE = regexp.MustCompile(`^\*\*([^*]+?)\.\*\*`)
)

// headings returns the heading texts of a Markdown file (fenced code blocks skipped; run-in
// headings included) and the set of the real headings' anchors, duplicates numbered as GitHub
// numbers them.
func headings(text string) ([]string, map[string]bool) {
	var hs []string
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := runInRE.FindStringSubmatch(line); m != nil {
			hs = append(hs, m[1])
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		hs = append(hs, m[1])
		a := anchor(m[1])
		if n := seen[a]; n > 0 {
			anchors[a+"-"+itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return hs, anchors
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// hasSection says whether a cited section names one of the headings: the heading itself, or the
// heading's text before a ':' or a " (" (so "C and Go" names "C and Go: one source for shared
// types and constants" and "Benchmark" names "Benchmark (`make bench-l4`)"). Case and backquotes
// are ignored.
func hasSection(hs []string, section string) bool {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "`", "")) }
	s := norm(section)
	for _, h := range hs {
		h = norm(h)
		if h == s || strings.HasPrefix(h, s+":") || strings.HasPrefix(h, s+" (") {
			return true
		}
	}
	return false
}

// flatten joins a file's lines into one string, each line break (with the indentation and the
// `//` of a Go comment that follow it) turned into one space, so that a citation wrapped over two
// comment or paragraph lines reads as one. lineOf maps an offset back to its 1-based line.
func flatten(text string) (string, func(int) int) {
	var b strings.Builder
	var starts []int
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if i > 0 {
			line = strings.TrimLeft(line, " \t")
			line = strings.TrimPrefix(line, "//")
			line = strings.TrimLeft(line, " \t")
			b.WriteByte(' ')
		}
		starts = append(starts, b.Len())
		b.WriteString(line)
	}
	return b.String(), func(off int) int {
		n := 0
		for n+1 < len(starts) && starts[n+1] <= off {
			n++
		}
		return n + 1
	}
}

var (
	// docs/NAME.md ("Section"), docs/NAME.md, "Section", docs/NAME.md "Section"; NAME.md alone
	// inside a doc (a sibling).
	citeRE = regexp.MustCompile(`((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.md)(?:,\s*|\s*\(\s*|\s+)"([^"]+)"`)
	// any docs/...md mention: the doc must exist.
	docRE = regexp.MustCompile(`docs/(?:[A-Za-z0-9_-]+/)*[A-Za-z0-9_-]+\.md`)
	// Markdown links: [text](target).
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// NAME.md#anchor outside a link.
	mdAnchorRE = regexp.MustCompile(`((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.md)#([A-Za-z0-9_-]+)`)
)

type doc struct {
	headings []string
	anchors  map[string]bool
}

type checker struct {
	root string
	docs map[string]*doc // by path relative to root; nil: missing
}

func (c *checker) load(rel string) *doc {
	if d, ok := c.docs[rel]; ok {
		return d
	}
	var d *doc
	if b, err := os.ReadFile(filepath.Join(c.root, rel)); err == nil {
		hs, as := headings(string(b))
		d = &doc{hs, as}
	}
	c.docs[rel] = d
	return d
}

// resolve names the file a reference in file from means: docs/... from the root, anything
// else relative to the citing file's directory.
func resolve(from, target string) string {
	if strings.HasPrefix(target, "docs/") {
		return filepath.Clean(target)
	}
	return filepath.Join(filepath.Dir(from), target)
}

// precededByPath says whether the match at off continues a longer path or word (so that
// "edge/docs/x.md" or "mydocs/x.md" is not read as a reference to docs/x.md).
func precededByPath(s string, off int) bool {
	if off == 0 {
		return false
	}
	r := s[off-1]
	return r == '/' || r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}

// check returns the problems of one file's references, each as "file:line: what".
func (c *checker) check(rel, text string) []string {
	var probs []string
	isMD := strings.HasSuffix(rel, ".md")
	flat, lineOf := flatten(text)
	at := func(off int, msg string) {
		probs = append(probs, rel+":"+itoa(lineOf(off))+": "+msg)
	}
	for _, m := range docRE.FindAllStringIndex(flat, -1) {
		if precededByPath(flat, m[0]) {
			continue
		}
		if c.load(flat[m[0]:m[1]]) == nil {
			at(m[0], "no such doc "+flat[m[0]:m[1]])
		}
	}
	for _, m := range citeRE.FindAllStringSubmatchIndex(flat, -1) {
		target, section := flat[m[2]:m[3]], flat[m[4]:m[5]]
		if precededByPath(flat, m[2]) {
			continue
		}
		if !strings.HasPrefix(target, "docs/") && !isMD {
			continue // a bare NAME.md in Go is not a citation of a doc
		}
		d := c.load(resolve(rel, target))
		if d == nil {
			at(m[0], "no such doc "+target)
		} else if !hasSection(d.headings, section) {
			at(m[0], target+` has no section "`+section+`"`)
		}
	}
	if isMD {
		for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
			probs = append(probs, c.checkLink(rel, text, text[m[2]:m[3]], func(msg string) string {
				return rel + ":" + itoa(strings.Count(text[:m[0]], "\n")+1) + ": " + msg
			})...)
		}
	}
	for _, m := range mdAnchorRE.FindAllStringSubmatchIndex(flat, -1) {
		if precededByPath(flat, m[2]) || (m[0] > 0 && flat[m[0]-1] == '(') {
			continue // links were checked above
		}
		if !strings.HasPrefix(flat[m[2]:m[3]], "docs/") && !isMD {
			continue
		}
		d := c.load(resolve(rel, flat[m[2]:m[3]]))
		if d == nil {
			at(m[0], "no such doc "+flat[m[2]:m[3]])
		} else if !d.anchors[flat[m[4]:m[5]]] {
			at(m[0], flat[m[2]:m[3]]+" has no heading with anchor #"+flat[m[4]:m[5]])
		}
	}
	return probs
}

func (c *checker) checkLink(rel, text, target string, where func(string) string) []string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil
	}
	path, frag, _ := strings.Cut(target, "#")
	if path == "" {
		if _, own := headings(text); frag != "" && !own[frag] {
			return []string{where("no heading with anchor #" + frag + " in this file")}
		}
		return nil
	}
	full := filepath.Join(filepath.Dir(rel), path)
	if !strings.HasSuffix(path, ".md") {
		if _, err := os.Stat(filepath.Join(c.root, full)); err != nil {
			return []string{where("link to a missing file " + path)}
		}
		return nil
	}
	d := c.load(full)
	if d == nil {
		return []string{where("link to a missing doc " + path)}
	}
	if frag != "" && !d.anchors[frag] {
		return []string{where(path + " has no heading with anchor #" + frag)}
	}
	return nil
}

// TestDocReferencesResolve scans every .go and .md file of the repository.
func TestDocReferencesResolve(t *testing.T) {
	root := repoRoot(t)
	self, _ := os.Getwd()
	c := &checker{root: root, docs: map[string]*doc{}}
	files := 0
	err := filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			// bin/ and bench/out/ hold build and run output (.gitignore), copies of the docs included.
			rel, _ := filepath.Rel(root, path)
			if name := e.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules") || path == self ||
				rel == "bin" || rel == filepath.Join("bench", "out") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files++
		for _, p := range c.check(rel, string(b)) {
			t.Error(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned only %d files under %s", files, root)
	}
}

// TestCheckerFindsBrokenReferences holds the checker to the forms it must read and refuse.
func TestCheckerFindsBrokenReferences(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	md := "# Title\n\n**Allow-lists.** Text.\n\n## Second chance\n\n## Benchmark (`make bench-x`)\n\n```\n# not a heading\n```\n\n## C and Go: one source\n\n## Same\n\n## Same\n"
	if err := os.WriteFile(filepath.Join(dir, "docs", "x.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &checker{root: dir, docs: map[string]*doc{}}
	good := []string{
		`// see docs/x.md ("Second chance").`,
		`// see docs/x.md, "Second chance"`,
		`// see docs/x.md "Benchmark" and docs/x.md, "C and Go"`,
		"// wrapped (docs/x.md, \"Second\n// chance\"): fine",
		`// docs/x.md with no section`,
		`// docs/x.md, "Allow-lists"`,
	}
	for _, g := range good {
		if p := c.check("a/a.go", g); len(p) > 0 {
			t.Errorf("%q: %v", g, p)
		}
	}
	if p := c.check("docs/y.md", "[a](x.md#second-chance) [b](x.md#same-1) [c](#title) x.md, \"Same\"\n# Title\n"); len(p) > 0 {
		t.Errorf("good links: %v", p)
	}
	bad := map[string]string{
		`// docs/x.md ("Speed")`:                `a/a.go:1: docs/x.md has no section "Speed"`,
		`// docs/nope.md, "Second chance"`:      `a/a.go:1: no such doc docs/nope.md`,
		"//\n// docs/x.md, \"# not a heading\"": `a/a.go:2: docs/x.md has no section "# not a heading"`,
	}
	for in, want := range bad {
		if p := c.check("a/a.go", in); len(p) == 0 || p[len(p)-1] != want {
			t.Errorf("%q: got %v, want %s", in, p, want)
		}
	}
	if p := c.check("docs/y.md", "text\n[a](x.md#speed)\n"); len(p) != 1 || p[0] != "docs/y.md:2: x.md has no heading with anchor #speed" {
		t.Errorf("bad anchor: %v", p)
	}
	if p := c.check("docs/y.md", "[a](#nowhere)\n"); len(p) != 1 {
		t.Errorf("bad local anchor: %v", p)
	}
	if a := anchor("Scale: many routes, many backends, reloads"); a != "scale-many-routes-many-backends-reloads" {
		t.Errorf("anchor: %s", a)
	}
}
