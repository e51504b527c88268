package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	"google.golang.org/protobuf/encoding/protojson"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/script"
)

const (
	// DefaultPageLimit is the page size of List and Balances when unset.
	DefaultPageLimit = 50
	// ScanBudget bounds how many index entries one List/Balances call walks,
	// so a selective filter over a large tenant costs a bounded amount of
	// Redis time per call (the page may then be short, with has_more).
	ScanBudget = 1000
)

// record is a reservation as get.lua/list.lua return it.
type record struct {
	ID                string `json:"id"`
	State             string `json:"state"`
	Unit              string `json:"unit"`
	Estimate          num    `json:"estimate"`
	ScopePath         string `json:"scope_path"`
	Affected          string `json:"affected"`
	Budgeted          string `json:"budgeted"`
	CreatedAt         num    `json:"created_at"`
	ExpiresAt         num    `json:"expires_at"`
	GraceMs           num    `json:"grace_ms"`
	Policy            string `json:"policy"`
	MaxExt            num    `json:"max_ext"`
	ExtCount          num    `json:"ext_count"`
	IdemKey           string `json:"idem_key"`
	Subject           string `json:"subject"`
	Action            string `json:"action"`
	Charged           *num   `json:"charged"`
	DebtIncurred      num    `json:"debt_incurred"`
	FinalizedAt       *num   `json:"finalized_at"`
	ExpiredAt         *num   `json:"expired_at"`
	Metadata          string `json:"metadata"`
	CommittedMetadata string `json:"committed_metadata"`
}

var lenient = protojson.UnmarshalOptions{DiscardUnknown: true}

func (r *record) proto() (*cyclesv1.Reservation, error) {
	unit := scope.ParseUnit(r.Unit)
	out := &cyclesv1.Reservation{
		ReservationId:  r.ID,
		Status:         cyclesv1.ReservationStatus(cyclesv1.ReservationStatus_value["RESERVATION_STATUS_"+r.State]),
		IdempotencyKey: r.IdemKey,
		Reserved:       amount(unit, r.Estimate),
		CreatedAtMs:    int64(r.CreatedAt),
		ExpiresAtMs:    int64(r.ExpiresAt),
		ScopePath:      r.ScopePath,
		GracePeriodMs:  int64(r.GraceMs),
		OveragePolicy:  scope.ParsePolicy(r.Policy),
		ExtensionCount: int32(r.ExtCount),
		MaxExtensions:  int32(r.MaxExt),
	}
	if err := json.Unmarshal([]byte(r.Affected), &out.AffectedScopes); r.Affected != "" && err != nil {
		return nil, fmt.Errorf("reservation %s: affected scopes: %w", r.ID, err)
	}
	if r.Affected == "" && r.ScopePath != "" {
		// Reserves store affected scopes only when they are not the scope
		// path's prefixes (docs/design.md#reservation-records).
		out.AffectedScopes = keys.ScopePrefixes(r.ScopePath)
	}
	budgeted, err := keys.BudgetedScopes(r.Budgeted, r.ScopePath)
	if err != nil {
		return nil, fmt.Errorf("reservation %s: budgeted scopes: %w", r.ID, err)
	}
	out.BudgetedScopes = budgeted
	subject := r.Subject
	if subject == "" && r.ScopePath != "" {
		// Left out by the reserve when the scope path implies it
		// (docs/design.md#reservation-records).
		subject = keys.ImpliedSubject(r.ScopePath)
	}
	if subject != "" {
		out.Subject = &cyclesv1.Subject{}
		if err := lenient.Unmarshal([]byte(subject), out.Subject); err != nil {
			return nil, fmt.Errorf("reservation %s: subject: %w", r.ID, err)
		}
	}
	if r.Action != "" {
		out.Action = &cyclesv1.Action{}
		if err := lenient.Unmarshal([]byte(r.Action), out.Action); err != nil {
			return nil, fmt.Errorf("reservation %s: action: %w", r.ID, err)
		}
	}
	if out.Metadata, err = structOf(r.Metadata); err != nil {
		return nil, fmt.Errorf("reservation %s: metadata: %w", r.ID, err)
	}
	if out.CommittedMetadata, err = structOf(r.CommittedMetadata); err != nil {
		return nil, fmt.Errorf("reservation %s: committed metadata: %w", r.ID, err)
	}
	switch r.State {
	case "COMMITTED":
		out.Committed = optAmount(unit, r.Charged)
		out.DebtIncurred = int64(r.DebtIncurred)
		fallthrough
	case "RELEASED":
		if r.FinalizedAt != nil {
			v := int64(*r.FinalizedAt)
			out.FinalizedAtMs = &v
		}
	case "EXPIRED":
		if r.ExpiredAt != nil {
			v := int64(*r.ExpiredAt)
			out.ExpiredAtMs = &v
		}
	}
	return out, nil
}

// Get reads one reservation of the effective tenant: docs/protocol.md#reads.
// Unknown ids — including ids of other tenants, whose keys live under their
// own tenant prefix — are NOT_FOUND: no cross-tenant existence oracle. An
// EXPIRED reservation is RESERVATION_EXPIRED.
func (l *Ledger) Get(ctx context.Context, tenant string, req *cyclesv1.GetReservationRequest) (*cyclesv1.GetReservationResponse, error) {
	t := keys.Tenant(tenant)
	var out struct {
		Rec record `json:"rec"`
	}
	key := reservationKeys{t.Reservation(req.GetReservationId())}
	err := scriptGet.RunInto(ctx, l.exec, &out, key, getArgs{})
	if l.archived != nil && apierr.HasCode(err, apierr.NotFound) {
		// Past the hot window: the same script answers from the archived
		// record's fields, so the answer is the one Redis gave.
		f, ok, aerr := l.archived(ctx, tenant, req.GetReservationId())
		if aerr != nil {
			return nil, fmt.Errorf("get reservation from the archive: %w", aerr)
		}
		if ok {
			pairs := make([]string, 0, 2*len(f))
			for k, v := range f {
				pairs = append(pairs, k, v)
			}
			err = scriptGet.RunInto(ctx, l.exec, &out, key, getArgs{pairs})
		}
	}
	if err != nil {
		return nil, err
	}
	r, err := out.Rec.proto()
	if err != nil {
		return nil, err
	}
	return &cyclesv1.GetReservationResponse{Reservation: r}, nil
}

// listCursor is the opaque ListReservations position: the score and the
// number of entries at that score already walked, bound to the filters and
// sort it was issued for.
type listCursor struct {
	V  int    `json:"v"`
	FH string `json:"fh"`
	S  string `json:"s"`
	K  int64  `json:"k"`
}

func (c listCursor) pin() (int, string) { return c.V, c.FH }

func (c listCursor) valid() bool {
	_, err := strconv.ParseInt(c.S, 10, 64)
	return err == nil && c.K >= 0
}

// listingCursor is a ListReservations cursor form: pin is its form version
// and the hash of the filters and sort it was issued for; valid checks its
// own fields.
type listingCursor interface {
	pin() (v int, fh string)
	valid() bool
}

// decodeListing reads the request's cursor s ("" = the first page: *cur is
// left as preset) into *cur, preset with this request's form and filter
// hash. A cursor of another form, filters or sort is refused, and so is one
// whose own fields are malformed (INVALID_REQUEST naming cursor).
func decodeListing[C listingCursor](s string, cur *C) error {
	if s == "" {
		return nil
	}
	v, fh := (*cur).pin()
	if err := pagecursor.DecodeJSON("cursor", s, cur); err != nil {
		return err
	}
	if gv, gfh := (*cur).pin(); gv != v || gfh != fh {
		return apierr.Invalid("cursor", "was issued for different filters or sort")
	}
	if !(*cur).valid() {
		return apierr.Invalid("cursor", "malformed")
	}
	return nil
}

// balancesCursor is the opaque GetBalances position: the last budgets-index
// member walked.
type balancesCursor struct {
	V  int    `json:"v"`
	FH string `json:"fh"`
	M  string `json:"m"`
}

func filterHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:8])
}

func optMs(v *int64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(*v, 10)
}

// segments are the exact scope segments a subject filter requires
// (values lowercased, as scope paths are).
func segments(vals [6]string) []string {
	segs := []string{}
	for i, v := range vals {
		if i == 0 || v == "" {
			continue // the tenant is implied by the key prefix
		}
		segs = append(segs, scope.Levels[i]+":"+strings.ToLower(v))
	}
	return segs
}

// checkTenantFilter: a tenant filter is validation only (docs/protocol.md#reads).
func checkTenantFilter(tenant, filter string) error {
	if filter != "" && filter != tenant {
		return apierr.New(apierr.Forbidden, "tenant filter %q does not match the caller's tenant", filter)
	}
	return nil
}

// stateFilter is a listing's status filter as the record stores it ("": any).
func stateFilter(req *cyclesv1.ListReservationsRequest) string {
	if req.GetStatus() == cyclesv1.ReservationStatus_RESERVATION_STATUS_UNSPECIFIED {
		return ""
	}
	return strings.TrimPrefix(req.GetStatus().String(), "RESERVATION_STATUS_")
}

// List pages the effective tenant's reservations: docs/protocol.md#reads, with the
// filters and sorts of runtime.proto. Each call walks at most ScanBudget
// index entries.
func (l *Ledger) List(ctx context.Context, tenant string, req *cyclesv1.ListReservationsRequest) (*cyclesv1.ListReservationsResponse, error) {
	if err := checkTenantFilter(tenant, req.GetTenant()); err != nil {
		return nil, err
	}
	t := keys.Tenant(tenant)
	state := stateFilter(req)
	segs := segments([6]string{"", req.GetWorkspace(), req.GetApp(), req.GetWorkflow(), req.GetAgent(), req.GetToolset()})
	byExpiry := req.GetSortBy() == cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT
	dir := "desc"
	if req.GetSortDir() == cyclesv1.SortDirection_SORT_DIRECTION_ASC {
		dir = "asc"
	}
	filters := map[string]any{
		"state": state, "idem": req.GetIdempotencyKey(), "segs": segs,
		"cf": optMs(req.CreatedFromMs), "ct": optMs(req.CreatedToMs),
		"ef": optMs(req.ExpiresFromMs), "et": optMs(req.ExpiresToMs),
		"ff": optMs(req.FinalizedFromMs), "ft": optMs(req.FinalizedToMs),
	}
	fj, err := json.Marshal(filters)
	if err != nil {
		return nil, fmt.Errorf("encode list filters: %w", err)
	}
	inc := map[string]bool{}
	for _, tok := range req.GetInclude() {
		inc[strings.ToLower(strings.TrimSpace(tok))] = true
	}
	if by := req.GetSortBy(); !indexedSort(by) {
		return l.listSorted(ctx, t, req, filterHash(tenant, string(fj), by.String(), dir), string(fj), inc)
	}
	fh := filterHash(tenant, string(fj), strconv.FormatBool(byExpiry), dir)

	index, lo, hi := t.Created(), "-inf", "+inf"
	from, to := req.CreatedFromMs, req.CreatedToMs
	if byExpiry {
		index, from, to = t.Expires(), req.ExpiresFromMs, req.ExpiresToMs
	}
	if from != nil {
		lo = optMs(from)
	}
	if to != nil {
		hi = optMs(to)
	}
	limit := int(req.GetLimit())
	defaults.Set(&limit, DefaultPageLimit)
	if l.mergedListing() {
		w := l.walk(t, tenant, index, dir, lo, hi, string(fj), inc, byExpiry, state, req)
		return l.listMerged(ctx, w, fh, req.GetCursor(), limit)
	}
	cur := listCursor{V: 1, FH: fh}
	if err := decodeListing(req.GetCursor(), &cur); err != nil {
		return nil, err
	}
	out, err := l.listPage(ctx, t, index, dir, lo, hi, cur, limit, string(fj), inc)
	if err != nil {
		return nil, err
	}
	resp := &cyclesv1.ListReservationsResponse{}
	for i := range out.Rows {
		r, err := out.Rows[i].proto()
		if err != nil {
			return nil, err
		}
		resp.Reservations = append(resp.Reservations, r)
	}
	if out.More {
		resp.HasMore = true
		resp.NextCursor = pagecursor.EncodeJSON(listCursor{V: 1, FH: fh, S: out.S, K: int64(out.K)})
	}
	return resp, nil
}

// listPage is one list.lua call: at most limit matching rows from index,
// walking at most ScanBudget entries from the cursor's position.
func (l *Ledger) listPage(ctx context.Context, t keys.Tenant, index, dir, lo, hi string, cur listCursor, limit int, filters string, inc map[string]bool) (*listPageResult, error) {
	var out listPageResult
	err := scriptList.RunInto(ctx, l.exec, &out, listKeys{t.Prefix(), index, t.Created(), t.Expires()},
		listArgs{dir, lo, hi, cur.K, limit, ScanBudget, filters, cur.S,
			boolArg(inc["metadata"]), boolArg(inc["committed_metadata"])})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// listPageResult is list.lua's reply.
type listPageResult struct {
	Rows script.LuaArray[record] `json:"rows"`
	More bool                    `json:"more"`
	S    string                  `json:"s"`
	K    num                     `json:"k"`
	// RS, RK: the position after each row; LID: the last id scanned.
	RS  script.LuaArray[string] `json:"rs"`
	RK  script.LuaArray[num]    `json:"rk"`
	LID string                  `json:"lid"`
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Balances pages the effective tenant's budgets matching the subject-segment
// filters (exact segment, case-insensitive) and optional unit: docs/protocol.md#reads.
// Children are always included. Order: scope path, then unit.
func (l *Ledger) Balances(ctx context.Context, tenant string, req *cyclesv1.GetBalancesRequest) (*cyclesv1.GetBalancesResponse, error) {
	if err := checkTenantFilter(tenant, req.GetTenant()); err != nil {
		return nil, err
	}
	t := keys.Tenant(tenant)
	segs := segments([6]string{"", req.GetWorkspace(), req.GetApp(), req.GetWorkflow(), req.GetAgent(), req.GetToolset()})
	unit := scope.UnitKey(req.GetUnit())
	sj, err := json.Marshal(segs)
	if err != nil {
		return nil, fmt.Errorf("encode balance filters: %w", err)
	}
	fh := filterHash(tenant, string(sj), unit)
	cur := balancesCursor{V: 1, FH: fh}
	if req.GetCursor() != "" {
		if err := pagecursor.DecodeJSON("cursor", req.GetCursor(), &cur); err != nil {
			return nil, err
		}
		if cur.V != 1 || cur.FH != fh || cur.M == "" {
			return nil, apierr.Invalid("cursor", "was issued for different filters")
		}
	}
	limit := int(req.GetLimit())
	defaults.Set(&limit, DefaultPageLimit)
	var out struct {
		Rows script.LuaArray[balanceRow] `json:"rows"`
		More bool                        `json:"more"`
		Last string                      `json:"last"`
	}
	err = scriptBalances.RunInto(ctx, l.exec, &out, balancesKeys{t.Prefix(), t.Budgets()},
		balancesArgs{cur.M, limit, ScanBudget, unit, string(sj)})
	if err != nil {
		return nil, err
	}
	resp := &cyclesv1.GetBalancesResponse{Balances: balances(cyclesv1.Unit_UNIT_UNSPECIFIED, out.Rows)}
	if out.More {
		resp.HasMore = true
		resp.NextCursor = pagecursor.EncodeJSON(balancesCursor{V: 1, FH: fh, M: out.Last})
	}
	return resp, nil
}
