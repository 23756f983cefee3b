package yamlx

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// aliasBomb returns the error for a document whose aliases expand past what yaml.v3 decodes
// (a "billion laughs": each anchor a list of aliases of the one before), else nil. yaml.v3
// refuses such a document with "document contains excessive aliasing" and no line, or, when
// the expanded values have the wrong type, with one type error per expanded value (dozens of
// identical lines that say nothing of aliases). It applies its rule while decoding; here it is
// applied to the whole expansion, counted without expanding anything.
func aliasBomb(root *yaml.Node) error {
	sizes := map[*yaml.Node]float64{} // expanded size of a node's subtree
	var worst *yaml.Node              // the alias expanding to the most values
	var size func(n *yaml.Node) float64
	size = func(n *yaml.Node) float64 {
		if s, ok := sizes[n]; ok {
			return s
		}
		sizes[n] = 1e18 // an alias inside its own anchor expands forever
		s := 1.0
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			s += size(n.Alias)
			if worst == nil || s > sizes[worst] {
				worst = n
			}
		}
		for _, c := range n.Content {
			s += size(c)
		}
		sizes[n] = s
		return s
	}
	total := size(root)
	written := 0.0
	var count func(n *yaml.Node)
	count = func(n *yaml.Node) {
		written++
		for _, c := range n.Content {
			count(c)
		}
	}
	count(root)
	aliased := total - written
	if worst == nil || aliased <= 100 || total <= 1000 || aliased/total <= allowedAliasRatio(total) {
		return nil
	}
	return &Error{Line: worst.Line, Field: "*" + worst.Value, Msg: fmt.Sprintf(
		"refuse the aliases: the %.0f values written expand to %s (an alias bomb: anchors holding aliases of anchors); write the values out, or alias only anchors that hold no aliases",
		written, expanded(total))}
}

// allowedAliasRatio is yaml.v3's bound on the share of values decoded through aliases: 99% of
// a document of up to 400,000 values, falling to 10% at 4,000,000.
func allowedAliasRatio(total float64) float64 {
	const low, high = 400_000, 4_000_000
	switch {
	case total <= low:
		return 0.99
	case total >= high:
		return 0.10
	}
	return 0.99 - 0.89*(total-low)/(high-low)
}

func expanded(n float64) string {
	if n >= 1e12 {
		return "more than 10^12"
	}
	return fmt.Sprintf("%.0f", n)
}
