package cycleshttp

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// window refuses a time window whose start is after its end.
func window(fromName, toName string, from, to *int64) error {
	if from != nil && to != nil && *from > *to {
		return apierr.Invalid(fromName, "is after %s", toName)
	}
	return nil
}

// listChecks: each time window in order; a sort key without a direction
// sorts descending.
func listChecks(req *cyclesv1.ListReservationsRequest) error {
	for _, err := range []error{window("from", "to", req.CreatedFromMs, req.CreatedToMs),
		window("expires_from", "expires_to", req.ExpiresFromMs, req.ExpiresToMs),
		window("finalized_from", "finalized_to", req.FinalizedFromMs, req.FinalizedToMs)} {
		if err != nil {
			return err
		}
	}
	if req.SortBy != cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_UNSPECIFIED && req.SortDir == cyclesv1.SortDirection_SORT_DIRECTION_UNSPECIFIED {
		req.SortDir = cyclesv1.SortDirection_SORT_DIRECTION_DESC
	}
	return nil
}

// sortKeys are the spec's sort_by names (its keys are not the enum's names).
var sortKeys = map[string]cyclesv1.ReservationSortField{
	"created_at_ms":  cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_CREATED_AT,
	"expires_at_ms":  cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT,
	"reservation_id": cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVATION_ID,
	"tenant":         cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_TENANT,
	"scope_path":     cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_SCOPE_PATH,
	"status":         cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_STATUS,
	"reserved":       cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVED,
}

func sortByParam(name, s string) (protoreflect.Value, error) {
	v, ok := sortKeys[s]
	if !ok {
		return protoreflect.Value{}, apierr.Invalid(name, "%q is not a sort key: reservation_id, tenant, scope_path, status, reserved, created_at_ms or expires_at_ms", s)
	}
	return protoreflect.ValueOfEnum(v.Number()), nil
}

// sortDirParam reads asc or desc (lower case, as the spec spells them).
func sortDirParam(name, s string) (protoreflect.Value, error) {
	switch s {
	case "asc":
		return protoreflect.ValueOfEnum(cyclesv1.SortDirection_SORT_DIRECTION_ASC.Number()), nil
	case "desc":
		return protoreflect.ValueOfEnum(cyclesv1.SortDirection_SORT_DIRECTION_DESC.Number()), nil
	}
	return protoreflect.Value{}, apierr.Invalid(name, "must be asc or desc, got %q", s)
}
