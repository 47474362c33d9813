//! [`ComponentFleet`] as a [`heart_fleet_core::FleetApi`] (and its lease context as a
//! [`heart_fleet_core::LeaseWork`]), so code written against the trait (the CLI's commands,
//! the conformance runner) runs through the component exactly as through the native crate.
//! Every method is the inherent method of the same name.

use heart_fleet_core::{LeaseStore, fleet_api_by_inherent_methods};

use crate::{ComponentFleet, ComponentLeaseContext};

fleet_api_by_inherent_methods!(ComponentFleet<S>, ComponentLeaseContext<'_, S>, where S: LeaseStore + 'static);
