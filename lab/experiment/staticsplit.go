package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/switchyard/switchyard/lab/experiment/edge/staticsplit"
)

func init() {
	Register(Experiment{
		Name:      "static-split",
		Stop:      "edge",
		Summary:   "the static-content split (seed 000): a page and its 20 assets on the app's name vs the assets on a content name through the edge; requests and bytes per page load at the app, the two names' TTLs",
		NeedsRoot: true,
		Run:       runStaticSplit,
	})
}

// The lesson's figures (Static Content Hosting, its measured table; Two Names, Two TTLs quoting
// the Domain Name System Design lesson's failover table).
const (
	lessonCombinedRequests = 21
	lessonCombinedBytes    = 216480
	lessonSplitRequests    = 1
	lessonSplitBytes       = 480
)

func runStaticSplit(ctx context.Context, w io.Writer, opt Options) error {
	p := staticsplit.Params{Pages: 10}
	if opt.Quick {
		p.Pages = 3
		fmt.Fprintln(w, "QUICK RUN: 3 page loads per arrangement instead of 10; the per-page counts are the same.")
	}
	fmt.Fprintln(w, "static-split: a lab of its own (1 client, the XDP forwarder, 1 L7 proxy, 1 app server, `dns run`, `edge run`).")
	fmt.Fprintln(w, "combined: the page and its assets on www.lab.test (DNS -> L7 VIP -> l7 -> app);")
	fmt.Fprintln(w, "split:    the shell and its assets on static.lab.test (DNS -> edge; a miss goes the same way), the tracking query on www.")
	fmt.Fprintf(w, "a page load: the shell, the 19 files it references, its tracking query; %d page loads per arrangement, no client cache.\n\n", p.Pages)
	r, err := staticsplit.Run(ctx, p)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "name             TTL    answer           || lesson")
	fmt.Fprintf(w, "%-16s %3d s  %-16s || app name, short: 30 s (a failover spends 0.50%% of the monthly budget; 1,600 upstream queries in 1,200 s)\n", r.WWW.Name, r.WWW.TTL, fmt.Sprint(r.WWW.Answers))
	fmt.Fprintf(w, "%-16s %3d s  %-16s || content name, long: 900 s (64 upstream queries; a failover would spend 14.28%%, but 12 edges hold the same bytes)\n\n", r.Static.Name, r.Static.TTL, fmt.Sprint(r.Static.Answers))
	fmt.Fprintln(w, "arrangement | page | client requests | reached the app | app body bytes | edge hit / miss || lesson: app requests | app bytes")
	fmt.Fprintln(w, "------------|------|-----------------|-----------------|----------------|-----------------||----------------------|----------")
	for _, l := range r.Loads {
		lr, lb := lessonCombinedRequests, lessonCombinedBytes
		if l.Arrangement == "split" {
			lr, lb = lessonSplitRequests, lessonSplitBytes
		}
		fmt.Fprintf(w, "%-11s | %4d | %15d | %15d | %14d | %7d / %-5d || %20d | %d\n", l.Arrangement, l.Page, l.Requests, l.AppRequests, l.AppBytes, l.EdgeHits, l.EdgeMisses, lr, lb)
	}
	c, s := r.Loads[0], r.Loads[len(r.Loads)-1]
	fmt.Fprintf(w, "\nrequests per page load at the app: combined %d, split %d once the edge holds the assets (lesson %d to %d);\n", c.AppRequests, s.AppRequests, lessonCombinedRequests, lessonSplitRequests)
	fmt.Fprintf(w, "app body bytes per page load: %d against %d (lesson %d against %d); the assets are %d bytes (lesson T13: 216,000)\n", c.AppBytes, s.AppBytes, lessonCombinedBytes, lessonSplitBytes, r.AssetBytes)
	var sum [2]int64
	for _, l := range r.Loads {
		if l.Arrangement == "split" {
			sum[1] += l.AppRequests
		} else {
			sum[0] += l.AppRequests
		}
	}
	fmt.Fprintf(w, "over the %d loads of each: combined %d requests at the app, split %d (one per load, plus the edge's 20 fills once)\n", p.Pages, sum[0], sum[1])
	fmt.Fprintln(w, `
What differs from the lesson, and why:
- The lesson's split hands the assets to a separate content process. Here the content name is the
  edge cache, and its origin is the same app tier (the L7 VIP; l7 routes /asset to its static
  pool), so the first split page load misses 20 times and those 20 reach the app once: the
  lesson's "split path + edge" row (the origin sees the 20 assets once per edge). From the second
  load on the edge answers every asset and the app sees the tracking query alone, the lesson's 1.
- Bytes are bodies, as the lesson's counter counts them (headers are not). The shell is real HTML
  (the lesson's is 6,000 bytes of x) padded to the same 6,000 bytes, and the tracking answer is
  the lesson's 480 bytes (K01 V5).
- The TTLs are the two ends of the first lesson's table, as the lesson chooses them: www.lab.test
  is a failover name (the L7 VIP, then the web VIP) that must move fast; static.lab.test points at
  unchanging bytes. The lab has one edge, not the lesson's twelve.`)
	if opt.JSON {
		return json.NewEncoder(w).Encode(r)
	}
	return nil
}
