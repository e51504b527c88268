package admin

import "github.com/cyclesgo/cycles-go/internal/script"

// The admin scripts (lua/admin/<name>.lua) with their KEYS and ARGV, in the
// order and under the names of each script's header. Only the API-key check
// runs per request; the rest are operator calls, each on its own.
var (
	scriptCloseTenant     = script.Bind[tenantKeys, tenantCtxArgs]("admin/close_tenant", script.Returns[closeReply]())
	scriptCreateAPIKey    = script.Bind[createKeyKeys, createKeyArgs]("admin/create_api_key", script.Returns[record]())
	scriptCreateBudget    = script.Bind[createBudgetKeys, createBudgetArgs]("admin/create_budget", script.Returns[record]())
	scriptCreateTenant    = script.Bind[tenantKeys, createTenantArgs]("admin/create_tenant", script.Returns[record]())
	scriptFundBudget      = script.Bind[fundKeys, fundArgs]("admin/fund_budget", script.Returns[fundingResult]())
	scriptGetBudget       = script.Bind[budgetKeys, budgetIDArgs]("admin/get_budget", script.Returns[record]())
	scriptGetTenant       = script.Bind[recordKeys, tenantIDArgs]("admin/get_tenant", script.Returns[record]())
	scriptListAPIKeys     = script.Bind[listKeysKeys, listKeysArgs]("admin/list_api_keys", script.Returns[keysPage]())
	scriptListBudgets     = script.Bind[listBudgetsKeys, listBudgetsArgs]("admin/list_budgets", script.Returns[budgetsPage]())
	scriptRegisterTenant  = script.Bind[registryKeys, tenantIDArgs]("admin/register_tenant", script.Returns[registered]())
	scriptRevokeAPIKey    = script.Bind[keyEventKeys, revokeKeyArgs]("admin/revoke_api_key", script.Returns[revokeReply]())
	scriptSetBudgetStatus = script.Bind[budgetChangeKeys, budgetStatusArgs]("admin/set_budget_status", script.Returns[record]())
	scriptUpdateBudget    = script.Bind[budgetChangeKeys, budgetPatchArgs]("admin/update_budget", script.Returns[record]())
	scriptUpdateTenant    = script.Bind[tenantKeys, tenantPatchArgs]("admin/update_tenant", script.Returns[record]())
	scriptVerifyAPIKey    = script.Bind[verifyKeyKeys, script.None]("admin/verify_api_key", script.Pipelined, script.Returns[verifyReply]())
	scriptTouchAPIKey     = script.Bind[apiKeyKeys, script.None]("admin/touch_api_key", script.Returns[bool]())
	scriptUpdateAPIKey    = script.Bind[keyEventKeys, updateKeyArgs]("admin/update_api_key", script.Returns[record]())
)

// The JSON replies (script.Returns) that are not a stored record.
type (
	closeReply struct {
		Tenant    record `json:"tenant"`
		ClosedNow bool   `json:"closed_now"`
	}
	revokeReply struct {
		Key        record `json:"key"`
		RevokedNow bool   `json:"revoked_now"`
	}
	registered struct {
		Added int `json:"added"`
	}
	verifyReply struct {
		Hash         string `json:"hash"`
		Status       string `json:"status"`
		TenantID     string `json:"tenant_id"`
		TenantStatus string `json:"tenant_status"`
		Permissions  string `json:"permissions"`
		ExpiresAt    string `json:"expires_at"`
		ScopeFilter  string `json:"scope_filter"`
		Now          string `json:"now"`
	}
	keysPage struct {
		Items jsonList[record] `json:"items"`
		Last  string           `json:"last"`
		More  bool             `json:"more"`
	}
	budgetsPage struct {
		Items jsonList[struct {
			M string `json:"m"`
			B record `json:"b"`
		}] `json:"items"`
		Last string `json:"last"`
		More bool   `json:"more"`
	}
)

type registryKeys struct {
	Tenants string `lua:"tenants"`
}

type recordKeys struct {
	Record string `lua:"tenant_record"`
}

type tenantKeys struct {
	Record string `lua:"tenant_record"`
	Events string `lua:"event_stream"`
}

type tenantIDArgs struct {
	Tenant string `lua:"tenant_id"`
}

type tenantCtxArgs struct {
	Tenant   string `lua:"tenant_id"`
	EventCtx string `lua:"event_ctx"`
}

type createTenantArgs struct {
	Tenant        string `lua:"tenant_id"`
	Name          string `lua:"name"`
	DefaultPolicy string `lua:"default_policy"`
	DefaultTTLms  int64  `lua:"default_ttl_ms"`
	MaxTTLms      int64  `lua:"max_ttl_ms"`
	MaxExtensions int64  `lua:"max_extensions"`
	Metadata      string `lua:"metadata"` // JSON object
	EventCtx      string `lua:"event_ctx"`
}

type tenantPatchArgs struct {
	Tenant   string `lua:"tenant_id"`
	Patch    string `lua:"patch"` // JSON object
	EventCtx string `lua:"event_ctx"`
}

type budgetKeys struct {
	Budget string `lua:"budget"`
}

type budgetIDArgs struct {
	Scope string `lua:"scope_path"`
	Unit  string `lua:"unit"`
}

type createBudgetKeys struct {
	Record string `lua:"tenant_record"`
	Budget string `lua:"budget"`
	Index  string `lua:"budget_index"`
	Events string `lua:"event_stream"`
}

type createBudgetArgs struct {
	Tenant         string `lua:"tenant_id"`
	Scope          string `lua:"scope_path"`
	Unit           string `lua:"unit"`
	Allocated      int64  `lua:"allocated"`
	OverdraftLimit int64  `lua:"overdraft_limit"`
	OveragePolicy  string `lua:"commit_overage_policy"`
	Caps           string `lua:"caps"`     // JSON, "" = none
	Metadata       string `lua:"metadata"` // JSON object
	EventCtx       string `lua:"event_ctx"`
}

type budgetChangeKeys struct {
	Record string `lua:"tenant_record"`
	Budget string `lua:"budget"`
	Events string `lua:"event_stream"`
}

type budgetPatchArgs struct {
	Scope    string `lua:"scope_path"`
	Unit     string `lua:"unit"`
	Patch    string `lua:"patch"` // JSON object
	EventCtx string `lua:"event_ctx"`
}

type budgetStatusArgs struct {
	Scope    string `lua:"scope_path"`
	Unit     string `lua:"unit"`
	Reason   string `lua:"reason"`
	EventCtx string `lua:"event_ctx"`
	Status   string `lua:"status"` // FROZEN | ACTIVE | CLOSED
}

type fundKeys struct {
	Record string `lua:"tenant_record"`
	Budget string `lua:"budget"`
	Idem   string `lua:"idem_record"`
	Events string `lua:"event_stream"`
}

type fundArgs struct {
	Operation      string `lua:"operation"`
	Amount         int64  `lua:"amount"`
	Spent          string `lua:"spent"` // decimal, "" = not given
	Reason         string `lua:"reason"`
	PayloadHash    string `lua:"payload_hash"`
	IdemLifetimeMs int64  `lua:"idem_lifetime_ms"`
	Scope          string `lua:"scope_path"`
	Unit           string `lua:"unit"`
	EventCtx       string `lua:"event_ctx"`
}

type listBudgetsKeys struct {
	Prefix string `lua:"tenant_prefix"`
	Index  string `lua:"budget_index"`
}

type listBudgetsArgs struct {
	Unit     string   `lua:"unit"`
	PageSize int      `lua:"page_size"`
	Scan     int      `lua:"scan"`
	Ranges   []string `lua:"ranges"` // ZRANGEBYLEX min, max, ...
}

type apiKeyKeys struct {
	Key string `lua:"api_key"`
}

type verifyKeyKeys struct {
	Key    string `lua:"api_key"`
	Record string `lua:"tenant_record"`
}

type keyEventKeys struct {
	Key    string `lua:"api_key"`
	Events string `lua:"event_stream"`
}

type createKeyKeys struct {
	Record string `lua:"tenant_record"`
	Key    string `lua:"api_key"`
	Index  string `lua:"key_index"`
	Events string `lua:"event_stream"`
}

type createKeyArgs struct {
	Tenant      string `lua:"tenant_id"`
	KeyID       string `lua:"key_id"`
	Name        string `lua:"name"`
	KeyHash     string `lua:"key_hash"`
	EventCtx    string `lua:"event_ctx"`
	Permissions string `lua:"permissions"`   // JSON array
	ExpiresAtMs string `lua:"expires_at_ms"` // decimal, "" = never
	Description string `lua:"description"`
	Metadata    string `lua:"metadata"`     // JSON object, "" = none
	ScopeFilter string `lua:"scope_filter"` // JSON array, "" = none
}

type revokeKeyArgs struct {
	Tenant   string `lua:"tenant_id"`
	KeyID    string `lua:"key_id"`
	EventCtx string `lua:"event_ctx"`
	Reason   string `lua:"reason"`
}

type updateKeyArgs struct {
	Tenant   string `lua:"tenant_id"`
	KeyID    string `lua:"key_id"`
	EventCtx string `lua:"event_ctx"`
	Fields   []any  `lua:"field_pairs"` // keyUpdateArgs
}

type listKeysKeys struct {
	Record string `lua:"tenant_record"`
	Index  string `lua:"key_index"`
	Prefix string `lua:"key_prefix"`
}

type listKeysArgs struct {
	Tenant   string `lua:"tenant_id"`
	After    string `lua:"after"`
	PageSize int    `lua:"page_size"`
	Status   string `lua:"status"`
	Search   string `lua:"search"`
	Scan     int    `lua:"scan"`
}
