package admin

import (
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// storedKeyID is the id tenant's key is stored under, from the key_id a
// request names in either form (auth.LocalKeyID). A public id of another
// tenant's key is KEY_NOT_FOUND, like any key tenant does not hold.
func storedKeyID(tenant, id string) (string, error) {
	if local, ok := auth.LocalKeyID(tenant, id); ok {
		return local, nil
	}
	return "", (&apierr.Error{Code: apierr.KeyNotFound, Message: "API key " + id + " not found"}).With("key_id", id)
}
