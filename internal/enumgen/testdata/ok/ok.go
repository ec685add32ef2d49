// Package ok is enumgen's test input.
package ok

// Color has names, and a constant without one.
//
//enum:string Color(%d)
type Color uint8

const (
	Red   Color = iota // "red"
	Green              // "green": the comment goes on
	Blue               // "blue"
	Mask  Color = 0x80 // not named: no literal
)

// Code has a second column and a fallback without a verb.
//
//enum:string unknown
//enum:method Short 0x%04x
type Code uint16

const (
	CodeA Code = 0x10 // "Alpha" "A"
	CodeB Code = 0x20 // "Beta" `B`
)

// Plain has no directive: enumgen leaves it alone.
type Plain int

const PlainOne Plain = 1 // "one"
