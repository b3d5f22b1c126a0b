package server

// AuthRules is the permission table, for the test that every procedure
// has a rule.
var AuthRules = authRules
