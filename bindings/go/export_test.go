package tocsin

// DriverCode exposes driverCode to the tests of package tocsin_test.
var DriverCode = driverCode
