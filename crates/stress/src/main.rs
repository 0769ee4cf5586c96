//! tarn-stress: randomized stress of the tarn engine, in the spirit of OpenZFS's ztest.

mod ops;

fn main() {
    let chooser = ops::OpChooser::new();
    let _ = chooser;
}
