// Package scripttest runs data-driven test scripts
// (github.com/cockroachdb/datadriven) with a registry of commands: each
// command of a script is carried out by one handler, looked up by the
// command's name, on the state the script's commands share (an Env). It
// also parses the arguments commands have in common: positional
// arguments, numbers and durations, and refuses arguments a command does
// not know.
package scripttest
