package adminapi

// TokenEnv is the environment variable that holds the admin bearer
// token, for paxlockd (over admin_token_file) and paxlockctl.
const TokenEnv = "PAXLOCK_ADMIN_TOKEN"
