// Package docref holds the test that every reference to a doc in the repository resolves: a
// `docs/NAME.md ("Section")` or `docs/NAME.md, "Section"` citation in Go or Markdown names a doc
// that exists and a heading it has, and a Markdown link `NAME.md#anchor` or `(#anchor)` names a
// file and a heading anchor that exist.
package docref
